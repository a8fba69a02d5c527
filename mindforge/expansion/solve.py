"""Expansion's ``Solver`` and ``Reflector``: the harness of an HCP version, the engine, the sandbox.

Solving is the shared ``mindforge.rollouts.HarnessSolver``, the same rollout
code that Update trains from: one harness turn per sample
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

from mindforge.harness import Harness
from mindforge.hcp import HCP
from mindforge.rollouts import HarnessSolver, fenced_block
from mindforge.tasks.models import Task, Trajectory


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


class AuditedSolver:
    """Expansion's ``Solver``: the shared harness solver, each answer checked for a parsable deliverable."""

    def __init__(self, solver: HarnessSolver):
        self.solver = solver

    def solve(self, hcp: HCP, tasks: Sequence[Task], samples: int, seed: int) -> list[Trajectory]:
        by_id = {t.id: t for t in tasks}
        out = []
        for tr in (t for g in self.solver.groups(hcp, tasks, samples, seed) for t in g):
            problem = None if "dropped" in tr.meta else format_problem(by_id[tr.task_id], tr.answer)
            out.append(tr.model_copy(update={"meta": {**tr.meta, "format_problem": problem}}) if problem else tr)
        return out


class HarnessReflector:
    """Runs the HCP's ``reflect`` role through the production harness (one hop, default route)."""

    def __init__(self, harness_for: Callable[[HCP], Harness]):
        self.harness_for = harness_for

    def reflect(self, hcp: HCP, prompt: str, seed: int) -> str:
        return asyncio.run(self.harness_for(hcp).role("reflect", prompt, seed=seed)).answer
