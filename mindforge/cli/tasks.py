"""`mindforge tasks ...`: import, validate and inspect task files (JSONL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import user_errors
from mindforge.errors import InputError
from mindforge.tasks.io import iter_jsonl, load_tasks
from mindforge.tasks.mbpp import import_mbpp
from mindforge.tasks.models import Task
from mindforge.tasks.seeds import family_counts, static_problems

app = typer.Typer(help="Import, validate and inspect task files (JSONL).", no_args_is_help=True)
PATHS = typer.Argument(help="JSONL files or folders of them.", show_default=False)


@app.command("import-mbpp")
@user_errors()
def import_mbpp_cmd(
    src: Annotated[Path, typer.Argument(help="MBPP JSON file (a list of records).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="JSONL file to write (atomically).")],
) -> None:
    """Convert MBPP records into L2 function tasks."""
    n = import_mbpp(src, out)
    typer.echo(f"converted {n} MBPP records from {src} -> {out}")


@app.command("validate")
def validate(paths: Annotated[list[Path], PATHS]) -> None:
    """Check task files: schema, ids, compilable code, entry points, leaks. Exit 2 on any error."""
    errors = 0
    seen: dict[str, str] = {}
    for file in _expand(paths):
        count, problems = _file_problems(file, seen)
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        errors += len(problems)
        if not problems:
            typer.echo(f"ok {file}: {count} tasks")
    if errors:
        typer.echo(f"{errors} error(s)", err=True)
        raise typer.Exit(2)


def _file_problems(file: Path, seen: dict[str, str]) -> tuple[int, list[str]]:
    """(tasks read, problems as 'file:line: ...'); ``seen`` maps ids to where first seen."""
    count, problems = 0, []
    try:
        for lineno, task in iter_jsonl(file, Task):
            count += 1
            where = f"{file}:{lineno}"
            problems += [f"{where}: {task.id}: {p}" for p in static_problems(task)]
            if task.id in seen:
                problems.append(f"{where}: duplicate task {task.id} (first at {seen[task.id]})")
            seen.setdefault(task.id, where)
    except InputError as exc:
        problems.append(str(exc))  # reading stops at the first malformed line
    except OSError as exc:
        problems.append(f"{file}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        problems.append(f"{file}: not UTF-8 text (byte {exc.start})")
    return count, problems


@app.command("stats")
@user_errors()
def stats(paths: Annotated[list[Path], PATHS]) -> None:
    """Count tasks by family and difficulty, and by source."""
    tasks = _load(paths)
    counts = family_counts(tasks)
    typer.echo(f"{'family':<8}{'total':>7}{'d1':>6}{'d2':>6}{'d3':>6}{'d?':>6}")
    for family, by_level in counts.items():
        cells = [by_level[1], by_level[2], by_level[3], by_level[None]]
        typer.echo(f"{family:<8}{sum(cells):>7}" + "".join(f"{c:>6}" for c in cells))
    sources: dict[str, int] = {}
    for task in tasks:
        sources[task.provenance.source] = sources.get(task.provenance.source, 0) + 1
    typer.echo(f"total {len(tasks)} tasks, {sum(len(t.tests) for t in tasks)} checker tests")
    typer.echo("sources: " + ", ".join(f"{s}={n}" for s, n in sorted(sources.items())))


@app.command("show")
@user_errors()
def show(
    paths: Annotated[list[Path], PATHS],
    task_id: Annotated[
        str | None, typer.Option("--id", help="Print this task (a unique id prefix is enough).")
    ] = None,
    solver: Annotated[
        bool, typer.Option("--solver", help="Print only what the solver sees.")
    ] = False,
) -> None:
    """List tasks one a line, or print one task as JSON."""
    tasks = _load(paths)
    if task_id is None:
        for t in tasks:
            level = t.provenance.difficulty or "-"
            head = t.prompt.splitlines()[0][:70]
            typer.echo(
                f"{t.id}  {t.family}  d{level}  {t.entry_point or t.output_kind:<24}  {head}"
            )
        return
    matches = [t for t in tasks if t.id.startswith(task_id)]
    if len(matches) != 1:
        found = "no task" if not matches else f"{len(matches)} tasks"
        raise InputError(", ".join(map(str, paths)), "", f"{found} with id starting {task_id!r}")
    task = matches[0]
    view = task.solver_view() if solver else task.model_dump(mode="json")
    typer.echo(json.dumps(view, indent=2, ensure_ascii=False))


def _load(paths: list[Path]) -> list[Task]:
    try:
        return load_tasks(*paths)
    except OSError as exc:
        raise InputError(
            str(exc.filename or paths[0]), "", f"cannot read: {exc.strerror or exc}"
        ) from None


def _expand(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.glob("*.jsonl")) if p.is_dir() else [p])
    return files
