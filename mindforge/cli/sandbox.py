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
    """The default HCP's sandbox (limits, test timeout, reruns): the verdicts a run's stages would give."""
    from mindforge.hcp import load_hcp
    from mindforge.paths import default_hcp_path
    from mindforge.sandbox.config import sandbox_config
    from mindforge.settings import load_settings

    settings = load_settings()
    return sandbox_config(load_hcp(default_hcp_path()).guarded, pool_size=workers or settings.sandbox_pool_size,
                          docker_host=settings.docker_host)


@app.command()
@user_errors()
def build() -> None:
    """Build the sandbox image (from a debootstrapped Debian base when no registry answers)."""
    from mindforge.sandbox import ensure_image

    tag = ensure_image(_config(), log=lambda m: print(f"[sandbox] {m}", file=sys.stderr))
    print(tag)


def _solutions(path: Path) -> list[tuple[int, str, str]]:
    """(line number, task id, solution) for every solution line, in file order.

    A task may have many solutions (samples of a model, variants of a
    reference): each line is its own job and gets its own verdict line.
    """
    from mindforge.errors import InputError

    out: list[tuple[int, str, str]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(str(path), str(lineno), f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("task_id"), str) or not isinstance(obj.get("solution"), str):
            raise InputError(str(path), str(lineno), 'expected {"task_id": str, "solution": str}')
        out.append((lineno, obj["task_id"], obj["solution"]))
    return out


@app.command()
@user_errors()
def verify(
    tasks: Annotated[Path, typer.Argument(help="Task JSONL file or folder")],
    solutions: Annotated[Path | None, typer.Option(
        help='JSONL of {"task_id", "solution"}; several lines may name one task, each is judged')] = None,
    workers: Annotated[int | None, typer.Option(
        help="Concurrent containers.", show_default="MINDFORGE_SANDBOX_POOL_SIZE or 2")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON line per verdict on stdout (with the solution's line number)")] = False,
) -> None:
    """Verify reference solutions (or given ones) in the sandbox.

    Exit 1 when a reference fails; exit 3 when the sandbox could not judge
    some solution (infra_error: the Docker daemon went away, a container
    was killed from outside), with the reason on stderr.
    """
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from mindforge.errors import InputError
    from mindforge.sandbox import SandboxPool
    from mindforge.tasks.io import load_tasks

    task_list = load_tasks(tasks)
    given = _solutions(solutions) if solutions else None
    if given is not None:
        by_id = {t.id: t for t in task_list}
        unknown = sorted({tid for _, tid, _ in given} - set(by_id))
        if unknown:
            raise InputError(str(solutions), "", f"unknown task ids: {', '.join(unknown[:5])}")
        jobs = [(by_id[tid], solution) for _, tid, solution in given]
        lines: list[int | None] = [lineno for lineno, _, _ in given]
    else:
        jobs = [(t, t.reference) for t in task_list]
        lines = [None] * len(jobs)
    err = Console(stderr=True)
    with SandboxPool(_config(workers)) as pool, Progress(console=err, transient=True) as bar:
        tid = bar.add_task("verifying", total=len(jobs))
        verdicts = pool.verify_many(jobs, progress=lambda i, v: bar.advance(tid))
    counts: dict[str, int] = {}
    for (task, _), lineno, v in zip(jobs, lines, verdicts, strict=True):
        counts[v.status] = counts.get(v.status, 0) + 1
        if as_json:
            record = {"task_id": task.id, "verdict": v.status.value,
                      "tests": [t.model_dump(mode="json") for t in v.tests],
                      "duration_s": round(v.duration_s, 3)}
            if lineno is not None:
                record["line"] = lineno  # which solution line this verdict is for
            if v.status == "infra_error":
                record["reason"] = v.log
            print(json.dumps(record))
    table = Table(title=f"{len(verdicts)} {'solutions' if given else 'references'} verified")
    for col in ("verdict", "count"):
        table.add_column(col)
    for k, n in sorted(counts.items()):
        table.add_row(k, str(n))
    err.print(table)
    reasons: dict[str, int] = {}
    for v in verdicts:
        if v.status == "infra_error":
            reasons[v.log] = reasons.get(v.log, 0) + 1
    for reason, n in reasons.items():
        err.print(f"infra_error x{n}: {reason}", markup=False, highlight=False)
    if reasons:
        raise typer.Exit(3)
    if given is None and counts.get("pass", 0) != len(verdicts):
        raise typer.Exit(1)
