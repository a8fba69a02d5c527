"""JSONL reading and writing of tasks, with errors that name file:line and field."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from mindforge.errors import InputError, pydantic_problems
from mindforge.store import RunDir, atomic_write_text, read_parquet
from mindforge.tasks.models import Task

M = TypeVar("M", bound=BaseModel)


def iter_jsonl(path: Path, model: type[M]) -> Iterator[tuple[int, M]]:
    """Yield (line number, validated model) per non-blank line; a bad line raises InputError."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(str(path), f"{lineno}", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
            try:
                yield lineno, model.model_validate(obj)
            except ValidationError as exc:
                pointer, msg = pydantic_problems(exc)[0]
                raise InputError(str(path), f"{lineno}", f"field {pointer}: {msg}") from None


def load_tasks(*paths: Path) -> list[Task]:
    """Tasks from JSONL files or folders of them; ids must be unique across all."""
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for p in paths:
        p = Path(p)
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            for lineno, task in iter_jsonl(f, Task):
                if task.id in seen:
                    raise InputError(str(f), str(lineno), f"duplicate task {task.id} (first in {seen[task.id]})")
                seen[task.id] = f"{f}"
                tasks.append(task)
    return tasks


def dump_jsonl(models: Iterable[BaseModel], path: Path) -> int:
    """Write models as JSON lines atomically; returns the count."""
    lines = [m.model_dump_json() for m in models]
    atomic_write_text(Path(path), "".join(line + "\n" for line in lines))
    return len(lines)


def seed_top_up(have: Sequence[Task], want: int, seeds: Path, keep: Callable[[Task], bool]) -> list[Task]:
    """The seed tasks ``keep`` admits and ``have`` lacks, when ``have`` holds fewer than ``want``; else none.

    A stage that reads the cycle's Discovery output calls this: a small model's
    Discovery can accept too few tasks of a family for the stage's splits.
    """
    if len(have) >= want:
        return []
    ids = {t.id for t in have}
    return [t for t in load_tasks(seeds) if keep(t) and t.id not in ids]


def archived_tasks(run_dir: Path, below: int | None = None) -> list[Task]:
    """Tasks accepted by Discovery in every cycle of the run (cycles < ``below`` when given).

    Cycle N's accepted tasks are ``cycles/N/discovery/tasks/*.parquet`` (written
    once, at the end of the stage), so this is every cycle folder's shards.
    """
    run = RunDir(run_dir)
    out: list[Task] = []
    for n in run.cycles():
        if below is not None and n >= below:
            continue
        folder = run.stage(n, "discovery") / "tasks"
        if folder.is_dir() and any(folder.glob("*.parquet")):
            out.extend(read_parquet(folder, Task))
    return out
