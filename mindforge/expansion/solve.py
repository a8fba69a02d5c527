"""The production ``Solver``: the harness of an HCP version, the engine, the sandbox.

Solving is the same rollout code that Update trains from
(``mindforge.update.rollouts.rollout_groups``): one harness turn per sample
(route, answer with tool turns in a sandbox session, summary), the answer
turned into the candidate the sandbox verifies, the reward from the verdict
as the HCP's guarded verifier settings say (binary or pass fraction, with its
reruns for flakiness), infrastructure errors kept with no reward. Using the
one implementation is the point: an HCP edit that helps here helps in
serving and in training alike.

This module adds what the audit needs on top: ``meta["format_problem"]``
when an answer has no parsable deliverable (no code block for a function or
HTML task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from mindforge.hcp import HCP, hcp_hash
from mindforge.tasks.models import Task, Trajectory, Verdict
from mindforge.update.rollouts import (
    HCP_REWARDS,
    RolloutConfig,
    SessionOpener,
    TurnRunner,
    fenced_block,
    rollout_groups,
)


def format_problem(task: Task, answer: str) -> str | None:
    """Why the answer holds no parsable deliverable for ``task`` (None when it does)."""
    if task.output_kind == "function":
        code = fenced_block(answer, ("python", "py", "python3"))
        if code is None:
            return "no ```python code block in the answer"
        if task.entry_point and f"def {task.entry_point}" not in code:
            return f"the code block does not define {task.entry_point}()"
    if task.output_kind == "html" and fenced_block(answer, ("html",)) is None and "<" not in answer:
        return "no ```html block and no markup in the answer"
    return None


class PoolVerifier:
    """A sandbox pool as rollouts' ``Verifier``, with the HCP's rerun count."""

    def __init__(self, pool: Any, reruns: int = 0):
        self.pool, self.reruns = pool, reruns

    def verify_many(self, jobs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        return self.pool.verify_many(jobs, reruns=self.reruns)


class HarnessSolver:
    """``Solver`` over a turn runner built for each HCP version (see ``runtime``)."""

    def __init__(self, runner_for: Callable[[HCP], TurnRunner], pool: Any,
                 open_session: SessionOpener | None = None, concurrency: int = 8):
        self.runner_for, self.pool = runner_for, pool
        self.open_session, self.concurrency = open_session, concurrency

    def solve(self, hcp: HCP, tasks: Sequence[Task], samples: int, seed: int) -> list[Trajectory]:
        verifier = PoolVerifier(self.pool, hcp.guarded.verifier.reruns)
        config = RolloutConfig(group_size=samples, reward=HCP_REWARDS[hcp.guarded.verifier.reward],
                               seed=seed, concurrency=self.concurrency)
        groups = asyncio.run(rollout_groups(
            tasks, self.runner_for(hcp), verifier, config, hcp_version=hcp_hash(hcp),
            route=hcp.router.default_route, open_session=self.open_session,
        ))
        by_id = {t.id: t for t in tasks}
        out = []
        for tr in (t for g in groups for t in g):
            problem = None if "dropped" in tr.meta else format_problem(by_id[tr.task_id], tr.answer)
            out.append(tr.model_copy(update={"meta": {**tr.meta, "format_problem": problem}}) if problem else tr)
        return out
