"""Publishing stage results as Prefect artifacts, with stable keys.

Keys are lowercase-dash and carry the cycle (``cycle-1-hcp-diff``), so the
Prefect UI's artifact page keeps one history per key across runs. Row builders
are plain functions over plain data, so tests can check them without Prefect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_TABLE_ROWS = 500


def key(cycle: int, what: str) -> str:
    return f"cycle-{cycle}-{what}".lower().replace("_", "-")


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, (list, tuple, dict)):
        return str(value)
    return value


def table(cycle: int, what: str, rows: Sequence[Mapping[str, Any]], description: str) -> None:
    from prefect.artifacts import create_table_artifact

    clean = [{k: _cell(v) for k, v in r.items()} for r in rows[:MAX_TABLE_ROWS]]
    if len(rows) > MAX_TABLE_ROWS:
        description += f" (first {MAX_TABLE_ROWS} of {len(rows)} rows)"
    create_table_artifact(table=clean, key=key(cycle, what), description=description)


def markdown(cycle: int, what: str, text: str, description: str) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=text, key=key(cycle, what), description=description)


def link(cycle: int, what: str, target: str, text: str) -> None:
    from prefect.artifacts import create_link_artifact

    create_link_artifact(link=target, link_text=text, key=key(cycle, what), description=text)


def summary_markdown(title: str, facts: Mapping[str, Any], notes: Iterable[str] = ()) -> str:
    lines = [f"# {title}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in facts.items()]
    extra = [n for n in notes if n]
    if extra:
        lines += [""] + [f"- {n}" for n in extra]
    return "\n".join(lines) + "\n"
