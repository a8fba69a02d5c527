"""The live services Expansion runs on, built from the run's services and closed afterwards.

``open_services(run, config)`` yields ``ExpansionServices`` whose solver goes
through the production harness to the run's engine (``mindforge.run_services``)
and verifies in a warm ``SandboxPool`` with the start HCP's guarded limits
(removed on exit, also on errors and Ctrl-C).

With a ``mapper`` that leaves the process (``mindforge.fanout``) the solver
is ``FanoutSolver``: each task set is cut into ``mapper.width`` chunks, and
each chunk is solved by ``solve_elsewhere(SolveJob)``, which builds the
harness solver and its sandbox pool from the job's data in the process that
runs it (once a process). Sample seeds depend on the task and the sample, not
on the chunk, so the trajectories are the ones one call here would make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

from pydantic import BaseModel, ConfigDict

from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.inputs import start_hcp_path
from mindforge.expansion.proposers import Proposer
from mindforge.expansion.solve import AuditedSolver, HarnessReflector
from mindforge.expansion.stage import ExpansionServices
from mindforge.fanout import Mapper, chunks, map_ordered, per_process
from mindforge.harness import EngineClient, task_runner
from mindforge.hcp import HCP, load_hcp
from mindforge.rollouts import HarnessSolver
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxConfig, SandboxPool
from mindforge.settings import ENGINE_MAX_BATCH
from mindforge.tasks.benchmarks import SealedSet
from mindforge.tasks.models import Task, Trajectory


@contextmanager
def open_services(run: RunServices, config: ExpansionConfig, log: Callable[[str], None] = print,
                  proposers: Sequence[Proposer] | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  mapper: Mapper | None = None) -> Iterator[ExpansionServices]:
    client = run.engine_client()  # one client: its connection pools are per event loop

    def harness_for(hcp: HCP) -> object:
        return run.harness(hcp, client)

    sandbox = run.sandbox(load_hcp(start_hcp_path(config)))

    def services(solver: object) -> ExpansionServices:
        return ExpansionServices(solver=solver, reflector=HarnessReflector(harness_for), proposers=proposers,
                                 log=log, progress=progress, sealed=SealedSet.of(run.settings.cache_dir))

    if mapper is not None and mapper.portable:
        yield services(FanoutSolver(mapper, run, sandbox))
        return
    with ExitStack() as stack:
        yield services(audited_solver(stack, run, sandbox, client))


def audited_solver(stack: ExitStack, run: RunServices, sandbox: SandboxConfig,
                   client: EngineClient | None = None) -> AuditedSolver:
    """The harness solver on a sandbox pool that ``stack`` closes."""
    client = client or run.engine_client()
    pool = stack.enter_context(SandboxPool(sandbox))
    # A scored task is one turn: the summary hop feeds only later turns, and the audit never reads it.
    return AuditedSolver(HarnessSolver(lambda hcp: task_runner(run.harness(hcp, client), summarize=False), pool,
                                       concurrency=ENGINE_MAX_BATCH))


class SolveJob(BaseModel):
    """A chunk of a task set to solve with one HCP, as data (``solve_elsewhere`` runs it)."""

    model_config = ConfigDict(frozen=True)

    run: RunServices
    sandbox: SandboxConfig  # the start HCP's, as in the stage's own pool
    hcp: HCP
    tasks: tuple[Task, ...]
    samples: int
    seed: int


def solve_elsewhere(job: SolveJob) -> list[Trajectory]:
    """Solve a chunk in whatever process runs this, on a solver built there (kept for its next chunk)."""
    key = job.run.model_dump_json() + job.sandbox.model_dump_json()
    solver = per_process("expansion", key, lambda stack: audited_solver(stack, job.run, job.sandbox))
    return solver.solve(job.hcp, job.tasks, job.samples, job.seed)


class FanoutSolver:
    """Expansion's ``Solver`` through a portable mapper: a task set in chunks, solved where the mapper runs."""

    def __init__(self, mapper: Mapper, run: RunServices, sandbox: SandboxConfig):
        self.mapper, self.run, self.sandbox = mapper, run, sandbox

    def solve(self, hcp: HCP, tasks: Sequence[Task], samples: int, seed: int) -> list[Trajectory]:
        jobs = [SolveJob(run=self.run, sandbox=self.sandbox, hcp=hcp, tasks=tuple(chunk), samples=samples,
                         seed=seed) for chunk in chunks(list(tasks), self.mapper.width)]
        return [t for got in map_ordered(self.mapper, solve_elsewhere, jobs) for t in got]
