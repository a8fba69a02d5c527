"""The live services an eval runs on, built from the run's services and closed afterwards.

``open_services(run, config)`` yields ``EvalServices``: the benchmark's tasks
(a registered benchmark of the run's settings), the HCP in force after the
cycle, and a ``HarnessSolver`` whose turns go through the production harness
to the run's engine and whose verdicts come from a sandbox pool with that
HCP's guarded limits (removed on exit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mindforge.eval.config import EvalConfig
from mindforge.eval.stage import EvalServices
from mindforge.harness import task_runner
from mindforge.hcp import HCP, apply_patch, load_hcp, parse_hcp, serving_patch
from mindforge.rollouts import HarnessSolver
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxPool
from mindforge.tasks import benchmarks


@contextmanager
def open_services(run: RunServices, config: EvalConfig, log: Callable[[str], None] = print,
                  progress: Callable[[int, int], None] | None = None) -> Iterator[EvalServices]:
    bench = benchmarks.get(run.settings.cache_dir, config.bench)
    hcp = load_hcp(run.hcp_path(config.cycle, "eval", config.hcp))
    if config.adapters_from is not None:
        hcp = parse_hcp(apply_patch(hcp.to_document(), serving_patch(load_hcp(config.adapters_from)),
                                    str(config.adapters_from)), str(config.adapters_from))
    run.serve(hcp.to_document(), log)
    client = run.engine_client()  # one client: its connection pools are per event loop

    def runner_for(h: HCP) -> object:
        # A scored turn ends the conversation: the summary hop feeds only later turns.
        return task_runner(run.harness(h, client), summarize=False, route=config.pin_route)

    with SandboxPool(run.sandbox(hcp)) as pool:
        yield EvalServices(tasks=bench.tasks(), bench_sha=bench.sha256(), hcp=hcp,
                           solver=HarnessSolver(runner_for, pool, concurrency=config.concurrency), log=log,
                           progress=progress)
