"""`mindforge expand`: the Expansion stage of one cycle from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors


def _print_human(result) -> None:
    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    table = Table(title=f"cycle {result.cycle}: {result.proposals} proposals, {result.candidates} evaluated, "
                        f"{result.accepted} accepted")
    for col in ("index", "proposer", "hash", "validation", "gain", "threshold", "decision", "hypothesis"):
        table.add_column(col, overflow="fold")
    for row in result.candidate_rows:
        table.add_row(*(str(row[c]) for c in ("index", "proposer", "hash", "validation", "gain", "threshold",
                                               "decision", "hypothesis")))
    err.print(table)
    t = result.test
    err.print(f"stop: {result.stop_reason}")
    err.print(f"test: start {t.start.text()}  best {t.best.text()}  gain {t.gain:+.3f} "
              f"(paired SE {'n/a' if t.se is None else f'{t.se:.3f}'}, n={t.best.n})")
    err.print(f"best HCP: {result.best_hcp_path}")


def _read_patches(path: Path) -> list[tuple[object, str]]:
    from mindforge.errors import InputError

    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(str(path), str(lineno), f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict) or "patch" not in obj:
            raise InputError(str(path), str(lineno), 'expected {"patch": [...], "hypothesis": "..."}')
        out.append((obj["patch"], str(obj.get("hypothesis", ""))))
    return out


@user_errors()
def expand(
    run_dir: Annotated[Path, typer.Option(help="Run directory (cycles/N/expansion/ is written)")],
    cycle: Annotated[int, typer.Option(help="Cycle number")] = 1,
    budget: Annotated[int, typer.Option(help="Candidate evaluations at most")] = 8,
    hcp: Annotated[Path | None, typer.Option("--hcp", help="Start HCP (default: the run's latest, else the default example)")] = None,
    tasks: Annotated[Path | None, typer.Option(help="Tasks (JSONL file/folder or parquet); default: Discovery's, else seeds")] = None,
    samples: Annotated[int, typer.Option(help="Samples per task")] = 1,
    max_tasks: Annotated[int | None, typer.Option(help="Use at most this many tasks (spread over families)")] = None,
    family: Annotated[list[str] | None, typer.Option(help="Only these families (repeatable)", **choices("L0", "L1", "L2", "L3"))] = None,
    patience: Annotated[int, typer.Option(help="Stop after this many evaluated candidates without acceptance")] = 4,
    max_rollouts: Annotated[int | None, typer.Option(help="Rollout budget")] = None,
    time_budget: Annotated[float | None, typer.Option(help="Seconds; checked between candidates")] = None,
    proposer: Annotated[list[str] | None, typer.Option(help="Edit proposers (repeatable)", **choices("reflect", "numeric", "structural"))] = None,
    minibatch: Annotated[int, typer.Option(help="Validation tasks in the first stage")] = 4,
    seed: Annotated[int, typer.Option(help="Sampling and split seed")] = 0,
    patches: Annotated[Path | None, typer.Option(help='JSONL of {"patch": [...], "hypothesis": "..."}: '
                                                      "propose only these, in order")] = None,
    no_seed_tasks: Annotated[bool, typer.Option("--no-seed-tasks", help="Fail instead of using seeds")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON summary line on stdout")] = False,
    engine: EngineOption = None,
) -> None:
    """Solve the cycle's tasks through an HCP, audit failures, and edit the HCP while gains are real."""
    from pydantic import ValidationError

    from mindforge.errors import InputError, pydantic_problems
    from mindforge.expansion import ExpansionConfig, ScriptedProposer, run_expansion
    from mindforge.expansion.runtime import open_services
    from mindforge.expansion.stage import finished_result
    from mindforge.run_services import open_run_services

    extra = {"proposers": tuple(proposer)} if proposer else {}
    try:
        config = ExpansionConfig(
            run_dir=run_dir, cycle=cycle, budget=budget, start_hcp=hcp, tasks=tasks, samples=samples,
            max_tasks=max_tasks, families=tuple(family or ()), patience=patience, max_rollouts=max_rollouts,
            time_budget_s=time_budget, minibatch=minibatch, seed=seed, use_seed_tasks=not no_seed_tasks,
            **extra,
        )
    except ValidationError as exc:
        where, problem = pydantic_problems(exc)[0]
        raise InputError("mindforge expand", f"option {where.strip('/')}", problem) from None

    from mindforge.cli.progress import stage_bar

    result = finished_result(config)
    with stage_bar("expand", "candidates", enabled=not as_json and result is None) as bar:
        if result is None:
            scripted = [ScriptedProposer(_read_patches(patches))] if patches else None
            # The run's engine serves the adapters its HCP names (from the run's catalog);
            # started here only when no engine is up, and stopped afterwards.
            with open_run_services(settings_with_engine(engine), run_dir, cycle, "expansion", hcp=hcp, log=bar.log) as run, \
                    open_services(run, config, log=bar.log, proposers=scripted, progress=bar.update) as services:
                result = run_expansion(config, services)
        else:
            bar.log(f"cycle {cycle} already expanded; showing the stored result")
    if as_json:
        print(json.dumps(result.summary()))
    else:
        _print_human(result)
