"""`mindforge discover`: the Discovery stage of one cycle from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors


def _print_human(result) -> None:
    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    table = Table(title=f"cycle {result.cycle}: {result.accepted} of {result.candidates} candidates accepted")
    for col in ("id", "family", "proposer", "solve_rate", "interval", "learnability"):
        table.add_column(col, overflow="fold")
    for row in result.accepted_rows:
        table.add_row(*(str(row[c]) for c in ("id", "family", "proposer", "solve_rate", "interval", "learnability")))
    err.print(table)
    err.print(f"rejected: {json.dumps(result.rejected)}")
    err.print(f"{result.tasks_per_minute} accepted tasks per minute; dataset {result.dataset}")


@user_errors()
def discover(
    run_dir: Annotated[Path, typer.Option(help="Run directory (cycles/N/discovery/ is written)")],
    cycle: Annotated[int, typer.Option(help="Cycle number")] = 1,
    budget: Annotated[int, typer.Option(help="Candidates proposed and judged")] = 40,
    hcp: Annotated[Path | None, typer.Option("--hcp", help="HCP (default: the run's latest, else the default)")] = None,
    family: Annotated[list[str] | None, typer.Option(help="Only these families (repeatable)", **choices("L0", "L1", "L2", "L3"))] = None,
    proposer: Annotated[list[str] | None, typer.Option(help="Task proposers (repeatable)", **choices("procedural", "model"))] = None,
    band_low: Annotated[float, typer.Option(help="Lowest solve rate kept")] = 0.1,
    band_high: Annotated[float, typer.Option(help="Highest solve rate kept")] = 0.9,
    min_samples: Annotated[int, typer.Option(help="Attempts before the early stop")] = 4,
    max_samples: Annotated[int, typer.Option(help="Attempts at most per task")] = 12,
    max_tokens: Annotated[int, typer.Option(help="Solver tokens per answer")] = 160,
    temperature: Annotated[float | None, typer.Option(help="Answer sampling temperature of the solve-rate "
                                                           "attempts (unset: 0.8; negative: the HCP's)")] = None,
    no_difficulty: Annotated[bool, typer.Option("--no-difficulty", help="Keep verified tasks without solving")] = False,
    seed: Annotated[int, typer.Option(help="Proposal and sampling seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON summary line on stdout")] = False,
    engine: EngineOption = None,
) -> None:
    """Propose new tasks, verify them in the sandbox, keep the novel ones the current model can learn from."""
    from pydantic import ValidationError

    from mindforge.discovery.config import DiscoveryConfig
    from mindforge.discovery.output import finished_result
    from mindforge.discovery.runtime import needs_engine, open_services
    from mindforge.discovery.stage import run_discovery
    from mindforge.errors import InputError, pydantic_problems
    from mindforge.run_services import open_run_services

    extra: dict = {"proposers": tuple(proposer)} if proposer else {}
    if temperature is not None:
        extra["temperature"] = None if temperature < 0 else temperature
    try:
        config = DiscoveryConfig(run_dir=run_dir, cycle=cycle, budget=budget, hcp=hcp, families=tuple(family or ()),
                                 band=(band_low, band_high), min_samples=min_samples, max_samples=max_samples,
                                 max_tokens=max_tokens,
                                 measure_difficulty=not no_difficulty, seed=seed, **extra)
    except ValidationError as exc:
        where, problem = pydantic_problems(exc)[0]
        field = where.strip("/")
        raise InputError("mindforge discover", f"option {field}" if field else "options", problem) from None

    import signal

    from mindforge.cli.progress import stage_bar

    # A SIGTERM (a killed flow, a supervisor) unwinds like Ctrl-C, so the engine and
    # containers this command started are stopped instead of orphaned.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    result = finished_result(config)
    with stage_bar("discover", "candidates", enabled=not as_json and result is None) as bar:
        if result is None:
            with open_run_services(settings_with_engine(engine), run_dir, cycle, "discovery", hcp=config.hcp,
                                   engine=needs_engine(config), log=bar.log) as run, \
                    open_services(run, config, log=bar.log, progress=bar.update) as services:
                result = run_discovery(config, services)
        else:
            bar.log(f"cycle {cycle} already discovered; showing the stored result")
    if as_json:
        print(json.dumps(result.summary()))
    else:
        _print_human(result)
