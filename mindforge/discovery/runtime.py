"""The live services Discovery runs on, built from the run's services and closed afterwards.

``open_services(run, config)`` yields ``DiscoveryServices``:

- sandbox: a warm ``SandboxPool`` with the HCP's guarded limits (every
  verification and every solver attempt is judged there), removed on exit;
- solver: the current model attempting a task through the production harness
  (route, routed adapter; the summary hop, which only later turns read, is
  skipped) in a fresh session per attempt, its answers sampled at the
  config's ``temperature``, scored by the sandbox with the same rollout code
  Update trains from;
- propose role: the harness's ``propose`` hop with the HCP's prompt.

The engine is the run's (``mindforge.run_services``); with
``measure_difficulty=False`` and no model proposer none is needed, and the
run's services may have been opened without one.

With a ``mapper`` that leaves the process (``mindforge.fanout``), no pool or
solver is opened here: each candidate is judged by ``judge_elsewhere(run,
config, candidate)``, which builds the sandbox pool and the solver from that
data in the process it runs in, once a process (``fanout.per_process``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mindforge.discovery import archive
from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.stage import Candidate, DiscoveryServices, judge_candidate, stage_dir
from mindforge.fanout import Mapper, per_process
from mindforge.harness import task_runner
from mindforge.hcp import HCP, hcp_hash, load_hcp
from mindforge.rollouts import HarnessSolver, persist
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxPool
from mindforge.settings import ENGINE_MAX_BATCH
from mindforge.tasks import benchmarks
from mindforge.tasks.decisions import Decision
from mindforge.tasks.models import Task


class AttemptSolver:
    """Discovery's ``Solver``: attempts of one task, each a harness turn judged by the sandbox."""

    def __init__(self, solver: HarnessSolver, hcp: HCP, seed: int = 0, trajectories: Path | None = None):
        self.solver, self.hcp, self.seed, self.trajectories = solver, hcp, seed, trajectories

    def attempts(self, task: Task, first: int, count: int) -> list[bool | None]:
        groups = self.solver.groups(self.hcp, [task], count, self.seed, reward="binary", seed_offset=first)
        if self.trajectories is not None:  # every attempt kept for inspection (cycle status counts them)
            persist(groups, self.trajectories, f"{task.id}-{first:03d}")
        return [None if t.reward is None else t.reward >= 1.0 for t in groups[0]]


def answering_at(hcp: HCP, temperature: float | None) -> HCP:
    """``hcp`` with its answer role sampling at ``temperature`` (None: unchanged)."""
    if temperature is None:
        return hcp
    sampling = hcp.provider.sampling
    answer = sampling.answer.model_copy(update={"temperature": temperature})
    provider = hcp.provider.model_copy(update={"sampling": sampling.model_copy(update={"answer": answer})})
    return hcp.model_copy(update={"provider": provider})


def needs_engine(config: DiscoveryConfig) -> bool:
    return config.measure_difficulty or "model" in config.proposers


@contextmanager
def open_services(run: RunServices, config: DiscoveryConfig, log: Callable[[str], None] = print,
                  progress: Callable[[int, int], None] | None = None,
                  mapper: Mapper | None = None) -> Iterator[DiscoveryServices]:
    """Discovery's live services; with a portable ``mapper`` the judging ones are built where it runs."""
    with ExitStack() as stack:
        elsewhere = mapper is not None and mapper.portable
        services = build_services(stack, run, config, log, progress, judges=not elsewhere)
        if mapper is not None:
            services.mapper = mapper
        if elsewhere:
            services.judge = functools.partial(judge_elsewhere, run, config)
        yield services


def build_services(stack: ExitStack, run: RunServices, config: DiscoveryConfig, log: Callable[[str], None],
                   progress: Callable[[int, int], None] | None = None, judges: bool = True) -> DiscoveryServices:
    """The services, closed by ``stack``; ``judges``: with the sandbox pool and the solver that judge."""
    hcp = load_hcp(archive.hcp_path(config))
    pool = stack.enter_context(SandboxPool(run.sandbox(hcp))) if judges else None
    services = DiscoveryServices(verifier=pool, propose_instructions=hcp.prompts.propose,
                                 hcp_version=hcp_hash(hcp), log=log, progress=progress,
                                 sealed_sources=tuple(benchmarks.sources(run.settings.cache_dir)),
                                 sealed=benchmarks.SealedSet.of(run.settings.cache_dir))
    if needs_engine(config):
        client = run.engine_client()

        async def propose_role(prompt: str, seed: int) -> str:
            record = await run.harness(hcp, client).role("propose", prompt, seed=seed,
                                                          max_tokens=config.propose_max_tokens)
            return record.answer

        def runner_for(h: HCP) -> object:
            return task_runner(run.harness(h, client), max_tokens=config.max_tokens, summarize=False)

        if pool is not None:
            services.solver = AttemptSolver(HarnessSolver(runner_for, pool, concurrency=ENGINE_MAX_BATCH),
                                            answering_at(hcp, config.temperature), config.seed,
                                            trajectories=stage_dir(config) / "trajectories")
        services.propose_role = propose_role
    return services


def judge_elsewhere(run: RunServices, config: DiscoveryConfig, candidate: Candidate) -> Decision | None:
    """Judge one candidate in whatever process runs this, on services built there from the data.

    The sandbox pool and the solver are kept for the process's next candidate
    of the same run and config (``fanout.per_process``), closed at its exit.
    """
    key = run.model_dump_json() + config.model_dump_json()
    services = per_process("discovery", key, lambda stack: build_services(stack, run, config, log=print))
    return judge_candidate(config, services, candidate)
