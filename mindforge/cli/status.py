"""`mindforge status RUN_DIR`: what a run holds (cycles, stages, tasks, HCP and adapter versions, scores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mindforge.cli._common import user_errors


def _num(x: Any) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _print_human(status: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("cycle", "discovery", "expansion", "update", "tasks", "HCP start → best → after",
                  "adapter", "test start → best", "validation before → after", title=status["run_dir"])
    for c in status["cycles"]:
        d, e, u = (c["stages"][s] for s in ("discovery", "expansion", "update"))
        table.add_row(
            f"{c['cycle']}{'' if c['complete'] else ' *'}", d["state"], e["state"], u["state"],
            _num(d.get("tasks")),
            f"{_num(e.get('start_hcp'))} → {_num(e.get('best_hcp'))} → {_num(u.get('hcp'))}",
            f"{_num(u.get('version'))}{' (rolled back)' if u.get('promoted') is False else ''}",
            f"{_num(e.get('test_start'))} → {_num(e.get('test_best'))}",
            f"{_num(u.get('reward_before'))} → {_num(u.get('reward_after'))}",
        )
    console.print(table)
    console.print(f"next cycle: {status['next_cycle']}  (* = not complete: the next run resumes it)")
    for route, names in status["adapters"].items():
        console.print(f"adapters {route}: {', '.join(names)}")


@user_errors()
def status(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as one JSON object.")] = False,
) -> None:
    """Summarise a run: cycles, stages, tasks, HCP versions, adapter versions, scores."""
    from mindforge.cycle.status import run_status

    found = run_status(run_dir)
    if as_json:
        print(json.dumps(found))
    else:
        _print_human(found)
