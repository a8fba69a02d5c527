"""The live services an eval runs on, built from the run's services and closed afterwards.

``open_services(run, config)`` yields ``EvalServices``: the benchmark's tasks
(a registered benchmark of the run's settings), the HCP in force after the
cycle, and a ``HarnessSolver`` whose turns go through the production harness
to the run's engine and whose verdicts come from a sandbox pool with that
HCP's guarded limits (removed on exit).

With a ``mapper`` that leaves the process (``mindforge.fanout``) no pool is
opened here: each missing shard is scored by ``score_elsewhere``, which
builds the solver and its pool from data in the process that runs it (once a
process).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from mindforge.eval.config import EvalConfig
from mindforge.eval.records import EvalRow
from mindforge.eval.stage import EvalServices, Shard, score_chunk
from mindforge.fanout import Mapper, per_process
from mindforge.harness import EngineClient, task_runner
from mindforge.hcp import HCP, apply_patch, load_hcp, parse_hcp, serving_patch
from mindforge.rollouts import HarnessSolver
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxConfig, SandboxPool
from mindforge.tasks import benchmarks


@contextmanager
def open_services(run: RunServices, config: EvalConfig, log: Callable[[str], None] = print,
                  progress: Callable[[int, int], None] | None = None,
                  mapper: Mapper | None = None) -> Iterator[EvalServices]:
    bench = benchmarks.get(run.settings.cache_dir, config.bench)
    hcp = load_hcp(run.hcp_path(config.cycle, "eval", config.hcp))
    if config.adapters_from is not None:
        hcp = parse_hcp(apply_patch(hcp.to_document(), serving_patch(load_hcp(config.adapters_from)),
                                    str(config.adapters_from)), str(config.adapters_from))
    run.serve(hcp.to_document(), log)
    with ExitStack() as stack:
        services = EvalServices(tasks=bench.tasks(), bench_sha=bench.sha256(), hcp=hcp, solver=None, log=log,
                                progress=progress, engine_dtype=run.engine_dtype())
        if mapper is not None:
            services.mapper = mapper
        if mapper is not None and mapper.portable:
            services.score = functools.partial(score_elsewhere, run, run.sandbox(hcp), config)
        else:
            services.solver = eval_solver(stack, run, run.sandbox(hcp), config, run.engine_client())
        yield services


def eval_solver(stack: ExitStack, run: RunServices, sandbox: SandboxConfig, config: EvalConfig,
                client: EngineClient | None = None) -> HarnessSolver:
    """The eval's harness solver on a sandbox pool that ``stack`` closes."""
    client = client or run.engine_client()  # one client: its connection pools are per event loop

    def runner_for(h: HCP) -> object:
        # A scored turn ends the conversation: the summary hop feeds only later turns.
        return task_runner(run.harness(h, client), summarize=False, route=config.pin_route)

    pool = stack.enter_context(SandboxPool(sandbox))
    return HarnessSolver(runner_for, pool, concurrency=config.concurrency)


def score_elsewhere(run: RunServices, sandbox: SandboxConfig, config: EvalConfig, shard: Shard) -> list[EvalRow]:
    """Score one shard in whatever process runs this, on a solver built there (kept for its next shard)."""
    key = run.model_dump_json() + sandbox.model_dump_json() + config.model_dump_json()
    solver = per_process("eval", key, lambda stack: eval_solver(stack, run, sandbox, config))
    services = EvalServices(tasks=(), bench_sha="", hcp=shard.hcp, solver=solver, log=print)
    return score_chunk(services, shard.hcp, shard.tasks, shard.samples, shard.seed, shard.mode)
