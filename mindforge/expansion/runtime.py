"""The live services Expansion runs on, built from the run's services and closed afterwards.

``open_services(run, config)`` yields ``ExpansionServices`` whose solver goes
through the production harness to the run's engine (``mindforge.run_services``)
and verifies in a warm ``SandboxPool`` with the start HCP's guarded limits
(removed on exit, also on errors and Ctrl-C).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.inputs import start_hcp_path
from mindforge.expansion.proposers import Proposer
from mindforge.expansion.solve import AuditedSolver, HarnessReflector
from mindforge.expansion.stage import ExpansionServices
from mindforge.harness import task_runner
from mindforge.hcp import HCP, load_hcp
from mindforge.rollouts import HarnessSolver
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxPool
from mindforge.tasks.benchmarks import SealedSet


@contextmanager
def open_services(run: RunServices, config: ExpansionConfig, log: Callable[[str], None] = print,
                  proposers: Sequence[Proposer] | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Iterator[ExpansionServices]:
    client = run.engine_client()  # one client: its connection pools are per event loop

    def harness_for(hcp: HCP) -> object:
        return run.harness(hcp, client)

    with SandboxPool(run.sandbox(load_hcp(start_hcp_path(config)))) as pool:
        # A scored task is one turn: the summary hop feeds only later turns, and the audit never reads it.
        solver = AuditedSolver(HarnessSolver(lambda hcp: task_runner(harness_for(hcp), summarize=False), pool,
                                             concurrency=32))
        yield ExpansionServices(solver=solver, reflector=HarnessReflector(harness_for), proposers=proposers,
                                log=log, progress=progress, sealed=SealedSet.of(run.settings.cache_dir))
