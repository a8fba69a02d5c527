"""`mindforge eval` and `mindforge bench`: a sealed benchmark scored as users are served."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors
from mindforge.hcp import ROUTES
from mindforge.settings import ENGINE_MAX_BATCH

bench_app = typer.Typer(help="Sealed benchmarks: evaluated every cycle, never trained or selected on.",
                        no_args_is_help=True)


@user_errors()
def eval_(
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory (cycles/N/eval/ is written).")],
    cycle: Annotated[int, typer.Option("--cycle", min=0, help="Score what this cycle left in force; 0 is the "
                                                              "baseline.")] = 0,
    bench: Annotated[str, typer.Option("--bench", help="A registered benchmark (mindforge bench list).")] = "mbpp",
    samples: Annotated[int, typer.Option("--samples", min=0, max=64, help="Also K samples a task at the HCP's "
                                                                          "answer sampling, for pass@k.")] = 0,
    max_tasks: Annotated[int | None, typer.Option("--max-tasks", min=1, help="A fixed subset of the benchmark "
                                                                             "(the same every cycle).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Requests in flight (the embedded "
                                                                         "engine decodes 64 at once).")] = ENGINE_MAX_BATCH,
    pin_route: Annotated[str | None, typer.Option(
        "--pin-route", help="Diagnostic: every task answered by this route, no route hop (oracle routing); "
                            "stored beside the cycle's eval, never as it.", **choices(*ROUTES))] = None,
    hcp: Annotated[Path | None, typer.Option(
        "--hcp", help="Diagnostic: score this HCP file (and the adapters it names) instead of the one in force; "
                      "stored beside the cycle's eval, never as it.")] = None,
    adapters_from: Annotated[Path | None, typer.Option(
        "--adapters-from", help="Diagnostic: serve the adapter versions this HCP file names with the scored "
                                "HCP's prompts and settings (Expansion-alone / Update-alone ablations).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON object: the eval.")] = False,
    engine: EngineOption = None,
) -> None:
    """Score a sealed benchmark through the production harness with the HCP and adapters a cycle left in force.

    Greedy pass@1 with its standard error, routing per task family, and (after cycle 0) the paired comparison
    with the previous cycle and with cycle 0. Results are stored per task; the same configuration is never
    scored twice, and a killed eval resumes. Uses a healthy engine when one runs (MINDFORGE_ENGINE_URL, or the
    one `mindforge up` started), else starts the embedded engine; what it started it stops.
    """
    from mindforge.cycle.core import generation, generation_line
    from mindforge.eval import EvalConfig, run_eval
    from mindforge.eval.runtime import open_services
    from mindforge.run_services import open_run_services

    config = EvalConfig(run_dir=run_dir, cycle=cycle, bench=bench, samples=samples, max_tasks=max_tasks,
                        concurrency=concurrency, pin_route=pin_route, hcp=hcp, adapters_from=adapters_from)

    from mindforge.cli.progress import stage_bar

    with stage_bar("eval", "answers", enabled=not as_json) as bar, \
            open_run_services(settings_with_engine(engine), run_dir, cycle, "eval", log=bar.log) as run, \
            open_services(run, config, log=bar.log, progress=bar.update) as services:
        before, start = run.generation_counters(), time.monotonic()
        result = run_eval(config, services)
        made = generation(before, run.generation_counters(), round(time.monotonic() - start, 3))
    if as_json:
        print(json.dumps(result.summary()))
    else:
        print_eval(result)
        if made and not result.reused:
            print(f"  engine: {generation_line(made)}")


def print_eval(result) -> None:
    from mindforge.eval.report import routing_words

    head = f"cycle {result.cycle} on {result.bench}: pass@1 {result.pass_at_1:.3f} ± {result.se:.3f} (n={result.n})"
    dtype = f"; {result.engine_dtype} engine" if result.engine_dtype != "float32" else ""
    print(head + (f"; {result.subset}" if result.subset else "") + dtype)
    for k, v in result.pass_at_k.items():
        print(f"  {k} {v:.3f}")
    for line in routing_words(result):
        print(f"  routing: {line}")
    for name, p in (("previous cycle", result.vs_previous), ("cycle 0", result.vs_cycle0)):
        if p is not None:
            print(f"  vs {name}: {p.diff:+.3f} ± {p.paired_se:.3f} paired SE over {p.n} tasks "
                  f"(+{p.gained} / -{p.lost}, McNemar p={p.mcnemar_p:.3g})")
    print(f"  {'reused stored results' if result.reused else f'scored in {result.seconds:.0f}s'}; key {result.key}")


@bench_app.command("list")
@user_errors()
def bench_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The registered benchmarks (built-in mbpp and the ones registered here)."""
    from mindforge.settings import load_settings
    from mindforge.tasks.benchmarks import registered

    found = registered(load_settings().cache_dir)
    if as_json:
        print(json.dumps({n: {"path": str(b.path), "format": b.format, "present": b.path.is_file()}
                          for n, b in found.items()}))
        return
    for name, b in found.items():
        print(f"{name}\t{b.format}\t{b.path}{'' if b.path.is_file() else '  (missing here)'}")
    if not found:  # installed without a checkout: the built-in mbpp has no folder to sit beside
        print("no benchmark registered: mbpp is built in only beside a source checkout; "
              "mindforge bench register NAME FILE", file=sys.stderr)


@bench_app.command("register")
@user_errors()
def bench_register(
    name: Annotated[str, typer.Argument(help="Benchmark name (lowercase).")],
    path: Annotated[Path, typer.Argument(help="Task JSONL (the task schema) or an MBPP-format JSON file.")],
) -> None:
    """Register a benchmark by path: sealed from then on (decontaminated against, never trained on)."""
    from mindforge.settings import load_settings
    from mindforge.tasks.benchmarks import register

    bench = register(load_settings().cache_dir, name, path)
    print(f"registered {bench.name}: {len(bench.tasks())} tasks from {bench.path}")
