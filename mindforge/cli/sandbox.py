"""`mindforge sandbox ...`: build the image, verify tasks and solutions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import user_errors

app = typer.Typer(help="Docker sandbox: build the image, verify solutions.", no_args_is_help=True)


def _config(workers: int | None = None):
    from mindforge.sandbox import SandboxConfig
    from mindforge.settings import load_settings

    size = workers or load_settings().sandbox_pool_size
    return SandboxConfig(pool_size=size)


@app.command()
@user_errors()
def build() -> None:
    """Build the sandbox image (from a debootstrapped Debian base when no registry answers)."""
    from mindforge.sandbox import ensure_image

    tag = ensure_image(_config(), log=lambda m: print(f"[sandbox] {m}", file=sys.stderr))
    print(tag)


def _solutions(path: Path) -> dict[str, str]:
    from mindforge.errors import InputError

    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(str(path), str(lineno), f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("task_id"), str) or not isinstance(obj.get("solution"), str):
            raise InputError(str(path), str(lineno), 'expected {"task_id": str, "solution": str}')
        out[obj["task_id"]] = obj["solution"]
    return out


@app.command()
@user_errors()
def verify(
    tasks: Annotated[Path, typer.Argument(help="Task JSONL file or folder")],
    solutions: Annotated[Path | None, typer.Option(help='JSONL of {"task_id", "solution"}')] = None,
    workers: Annotated[int | None, typer.Option(help="Concurrent containers")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per task on stdout")] = False,
) -> None:
    """Verify reference solutions (or given ones) in the sandbox. Exit 1 when a reference fails."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from mindforge.errors import InputError
    from mindforge.sandbox import SandboxPool
    from mindforge.tasks.io import load_tasks

    task_list = load_tasks(tasks)
    given = _solutions(solutions) if solutions else None
    if given is not None:
        unknown = sorted(set(given) - {t.id for t in task_list})
        if unknown:
            raise InputError(str(solutions), "", f"unknown task ids: {', '.join(unknown[:5])}")
        task_list = [t for t in task_list if t.id in given]
    jobs = [(t, given[t.id] if given else t.reference) for t in task_list]
    err = Console(stderr=True)
    with SandboxPool(_config(workers)) as pool, Progress(console=err, transient=True) as bar:
        tid = bar.add_task("verifying", total=len(jobs))
        verdicts = pool.verify_many(jobs, progress=lambda i, v: bar.advance(tid))
    counts: dict[str, int] = {}
    for task, v in zip(task_list, verdicts):
        counts[v.status] = counts.get(v.status, 0) + 1
        if as_json:
            print(json.dumps({"task_id": task.id, "verdict": v.status.value,
                              "tests": [t.model_dump(mode="json") for t in v.tests],
                              "duration_s": round(v.duration_s, 3)}))
    table = Table(title=f"{len(verdicts)} {'solutions' if given else 'references'} verified")
    for col in ("verdict", "count"):
        table.add_column(col)
    for k, n in sorted(counts.items()):
        table.add_row(k, str(n))
    err.print(table)
    if given is None and counts.get("pass", 0) != len(verdicts):
        raise typer.Exit(1)
