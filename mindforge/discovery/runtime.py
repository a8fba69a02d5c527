"""The live services Discovery runs on, found or started, and stopped afterwards.

``open_services(settings, config)`` yields ``DiscoveryServices``:

- sandbox: a warm ``SandboxPool`` (every verification and every solver
  attempt is judged there), removed on exit;
- engine: the run's engine (``mindforge.cycle.runtime.cycle_engine``): a
  healthy configured one or the one ``mindforge up`` started, else the
  embedded engine on the default model serving the adapters the HCP names,
  stopped on exit;
- solver: the current model attempting a task through the production harness
  (route, routed adapter; the summary hop, which only later turns read, is
  skipped) in a fresh session per attempt, scored by the sandbox with the
  same rollout code Update trains from;
- propose role: the harness's ``propose`` hop with the HCP's prompt.

With ``measure_difficulty=False`` and no model proposer no engine is needed
and none is started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from mindforge.discovery import archive
from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.stage import DiscoveryServices, stage_dir
from mindforge.hcp import HCP, hcp_hash, load_hcp
from mindforge.settings import Settings
from mindforge.tasks.models import Task


class HarnessSolver:
    """``Solver``: attempts of a task by the current model, each a harness turn judged by the sandbox."""

    def __init__(self, harness_for: Callable[[], Any], pool: Any, hcp: HCP, max_tokens: int, seed: int = 0,
                 trajectories: Path | None = None):
        self.harness_for, self.pool, self.hcp = harness_for, pool, hcp
        self.max_tokens, self.seed, self.trajectories = max_tokens, seed, trajectories

    def attempts(self, task: Task, first: int, count: int) -> list[bool | None]:
        from mindforge.harness import task_runner
        from mindforge.update.rollouts import RolloutConfig, persist, rollout_groups

        config = RolloutConfig(group_size=count, reward="binary", seed=self.seed, concurrency=count)
        groups = asyncio.run(rollout_groups(
            [task], task_runner(self.harness_for(), max_tokens=self.max_tokens, summarize=False), self.pool, config,
            hcp_version=hcp_hash(self.hcp), route=self.hcp.router.default_route, open_session=self.pool.session,
            seed_offset=first,
        ))
        if self.trajectories is not None:  # every attempt kept for inspection (cycle status counts them)
            persist(groups, self.trajectories, f"{task.id}-{first:03d}")
        return [None if t.reward is None else t.reward >= 1.0 for t in groups[0]]


@contextmanager
def open_services(settings: Settings, config: DiscoveryConfig,
                  log: Callable[[str], None] = print) -> Iterator[DiscoveryServices]:
    from mindforge.sandbox import SandboxConfig, SandboxPool

    hcp = load_hcp(archive.hcp_path(config))
    with ExitStack() as stack:
        pool = stack.enter_context(SandboxPool(SandboxConfig(pool_size=settings.sandbox_pool_size)))
        services = DiscoveryServices(verifier=pool, propose_instructions=hcp.prompts.propose,
                                     hcp_version=hcp_hash(hcp), log=log)
        if config.measure_difficulty or "model" in config.proposers:
            from mindforge.cycle.runtime import cycle_engine
            from mindforge.engine.registry import resolve_model
            from mindforge.harness import EngineClient, open_harness

            live = stack.enter_context(cycle_engine(settings, config.run_dir, config.cycle, log))
            model_path = resolve_model(live.model, live)

            def harness_for() -> Any:
                return open_harness(hcp, live.engine_url, model_path, live,
                                    client=EngineClient(live.engine_url, api_key=live.api_key))

            async def propose_role(prompt: str, seed: int) -> str:
                record = await harness_for().role("propose", prompt, seed=seed, max_tokens=config.propose_max_tokens)
                return record.answer

            services.solver = HarnessSolver(harness_for, pool, hcp, config.max_tokens, config.seed,
                                            trajectories=stage_dir(config) / "trajectories")
            services.propose_role = propose_role
        yield services
