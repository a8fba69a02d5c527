"""`mindforge cycle`: run RSI cycles (Discovery → Expansion → Update) from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors


def parse_sets(items: list[str]) -> dict[str, dict[str, Any]]:
    """``stage.field=value`` (value as JSON when it parses, else text) -> {stage: {field: value}}."""
    from mindforge.errors import InputError

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        stage, dot, field = name.partition(".")
        if not sep or not dot or stage not in ("discovery", "expansion", "update", "eval") or not field:
            raise InputError("mindforge cycle", f"--set {item}", "expected STAGE.FIELD=VALUE with STAGE one of "
                                                                  "discovery, expansion, update, eval")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(stage, {})[field] = value
    return out


def build_config(run_dir: Path, params: Path | None, cycles: int | None, first_cycle: int | None,
                 stages: list[str] | None, sets: list[str], engine: str | None = None) -> Any:
    from mindforge.cycle import load_cycle_config
    from mindforge.errors import InputError

    data: dict[str, Any] = {}
    if params is not None:
        try:
            data = json.loads(params.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(str(params), "", f"expected a JSON object of cycle parameters: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(str(params), "", "expected a JSON object of cycle parameters")
    data["run_dir"] = str(run_dir)
    for key, value in (("cycles", cycles), ("first_cycle", first_cycle), ("engine", engine)):
        if value is not None:
            data[key] = value
    if stages:
        data["stages"] = stages
    for stage, fields in parse_sets(sets).items():
        data[stage] = {**data.get(stage, {}), **fields}
    return load_cycle_config(str(params) if params else "mindforge cycle", data)


def _run_library(config: Any, as_json: bool) -> list[Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mindforge.cycle import next_cycle, run_cycles
    from mindforge.cycle.config import validate_stage_configs
    from mindforge.cycle.runtime import library_runners
    from mindforge.run_services import open_run_services

    console = Console(stderr=True)
    first = config.first_cycle or next_cycle(config.run_dir)
    config = config.model_copy(update={"first_cycle": first})
    validate_stage_configs(config, first)  # before an engine is started for nothing
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, disable=as_json)

    def log(message: str) -> None:
        bar.console.print(f"[cycle] {message}", highlight=False)

    with bar:
        stages = bar.add_task("stages", total=config.cycles * len(config.stages))
        steps = bar.add_task("GRPO steps", total=None, visible=False)

        def progress(done: int, total: int, row: Any = None) -> None:
            bar.update(steps, completed=done, total=total, visible=True)

        with open_run_services(settings_with_engine(config.engine), config.run_dir, first, log=log) as run:
            runners = library_runners(run, log, progress)

            def counted(name: str) -> Any:
                def run(stage_config: Any) -> Any:
                    bar.update(stages, description=f"cycle {stage_config.cycle}: {name}")
                    try:
                        return runners[name](stage_config)
                    finally:
                        bar.advance(stages)
                return run

            results = run_cycles(config, {name: counted(name) for name in runners}, log, meter=run.generation_counters)
        bar.update(stages, completed=config.cycles * len(config.stages))
    return results


def _print_human(results: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from mindforge.eval.report import efficacy_cell

    table = Table("cycle", "stages", "tasks", "HCP start → after", "changed", "adapter", "validation before → after",
                  "efficacy")
    for r in results:
        v = r.validation
        table.add_row(str(r.cycle), " ".join(f"{k[:3]}:{s.status}" for k, s in r.stages.items()),
                      "-" if r.tasks_accepted is None else str(r.tasks_accepted),
                      f"{r.hcp_start} → {r.hcp_after}", ", ".join(r.hcp_changed_paths) or "-",
                      f"{r.adapter.get('version', '-')}{'' if r.adapter.get('promoted', True) else ' (rolled back)'}",
                      f"{v.get('reward_before')} → {v.get('reward_after')} (SE {v.get('se')})", efficacy_cell(r.eval))
    Console().print(table)


@user_errors()
def cycle(
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory (cycles/N/<stage>/ are written).")],
    cycles: Annotated[int | None, typer.Option("--cycles", min=1, help="Cycles to run.", show_default="1")] = None,
    first_cycle: Annotated[int | None, typer.Option(
        "--first-cycle", min=1, help="Start here.", show_default="the first unfinished cycle")] = None,
    stage: Annotated[list[str] | None, typer.Option(
        "--stage", help="Only these stages (repeatable); without discovery, seed tasks are used.",
        **choices("discovery", "expansion", "update", "eval"))] = None,
    params: Annotated[Path | None, typer.Option(
        "--params", help="JSON file of cycle parameters (the rsi-cycle flow's `params`).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="STAGE.FIELD=VALUE for a stage's config, e.g. expansion.budget=2 (repeatable).")] = None,
    prefect: Annotated[bool, typer.Option(
        "--prefect", help="Run as the rsi-cycle Prefect flow (artifacts in the UI of PREFECT_API_URL).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON line: the cycles' facts.")] = False,
    engine: EngineOption = None,
) -> None:
    """Run RSI cycles: Discovery, Expansion and Update in order, resuming at the stage that failed.

    Each cycle starts from the HCP, adapters and task archive the previous one left in the run directory.
    A healthy engine is reused (MINDFORGE_ENGINE_URL, or the one `mindforge up` started when it is the
    kind --engine names); otherwise the engine --engine names (embedded by default, or vLLM) is started
    for the run and stopped at the end.
    """
    config = build_config(run_dir, params, cycles, first_cycle, stage, set_ or [], engine)
    if prefect:
        from mindforge.flows.rsi_cycle import rsi_cycle

        facts = rsi_cycle(config)
    else:
        results = _run_library(config, as_json)
        facts = [r.facts() for r in results]
        if not as_json:
            _print_human(results)
    if as_json:
        sys.stdout.write(json.dumps(facts) + "\n")
