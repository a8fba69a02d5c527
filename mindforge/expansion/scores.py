"""Scores of an HCP version on a set of tasks, and paired comparisons.

The unit of measurement is the task: a task's score is the mean reward of its
samples, infrastructure errors excluded (they say nothing about the HCP). Two
versions are compared on the tasks both scored, task by task, with the same
seeds, so the standard error is that of the paired difference: the spread of
task difficulty cancels and a real gain shows with far fewer tasks than two
independent means would need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from mindforge.tasks.models import Task, Trajectory


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    se: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.se:.3f} (n={self.n})"


class TaskScores(BaseModel):
    """Per task: mean reward over its scored samples, and the task's route."""

    model_config = ConfigDict(frozen=True)

    hcp_version: str
    scores: dict[str, float]
    routes: dict[str, str]
    rollouts: int = 0
    infra_errors: int = 0

    def summary(self, task_ids: Iterable[str] | None = None) -> Summary:
        ids = list(self.scores) if task_ids is None else [i for i in task_ids if i in self.scores]
        return summarize([self.scores[i] for i in ids])

    def restrict(self, task_ids: Iterable[str]) -> TaskScores:
        keep = set(task_ids)
        return self.model_copy(update={"scores": {k: v for k, v in self.scores.items() if k in keep}})

    def merged(self, other: TaskScores) -> TaskScores:
        """Scores of both (same version); ``other`` wins on a task both scored."""
        return self.model_copy(update={
            "scores": {**self.scores, **other.scores},
            "routes": {**self.routes, **other.routes},
            "rollouts": self.rollouts + other.rollouts,
            "infra_errors": self.infra_errors + other.infra_errors,
        })


class Comparison(BaseModel):
    """Candidate minus incumbent on the tasks both scored."""

    model_config = ConfigDict(frozen=True)

    gain: float
    se: float
    n: int
    candidate: Summary
    incumbent: Summary
    per_route: dict[str, float]


def summarize(values: Sequence[float]) -> Summary:
    n = len(values)
    if n == 0:
        return Summary(mean=0.0, se=math.inf, n=0)
    mean = sum(values) / n
    if n == 1:
        return Summary(mean=mean, se=math.inf, n=1)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return Summary(mean=mean, se=math.sqrt(var / n), n=n)


def task_scores(trajectories: Iterable[Trajectory], tasks: Sequence[Task], hcp_version: str) -> TaskScores:
    """Mean reward per task (trajectories without a reward are infrastructure errors)."""
    rewards: dict[str, list[float]] = {}
    rollouts = infra = 0
    for tr in trajectories:
        rollouts += 1
        if tr.reward is None:
            infra += 1
            continue
        rewards.setdefault(tr.task_id, []).append(tr.reward)
    routes = {t.id: t.family for t in tasks}
    scores = {tid: sum(r) / len(r) for tid, r in rewards.items() if tid in routes}
    return TaskScores(hcp_version=hcp_version, scores=scores, routes=routes, rollouts=rollouts,
                      infra_errors=infra)


def compare(candidate: TaskScores, incumbent: TaskScores, task_ids: Iterable[str] | None = None) -> Comparison:
    """Paired comparison on the tasks both scored (optionally only ``task_ids``)."""
    pool = candidate.scores.keys() & incumbent.scores.keys()
    ids = sorted(pool if task_ids is None else pool & set(task_ids))
    diffs = [candidate.scores[i] - incumbent.scores[i] for i in ids]
    paired = summarize(diffs)
    by_route: dict[str, list[float]] = {}
    for i, d in zip(ids, diffs):
        by_route.setdefault(candidate.routes.get(i, incumbent.routes.get(i, "?")), []).append(d)
    return Comparison(
        gain=paired.mean,
        se=paired.se,
        n=paired.n,
        candidate=summarize([candidate.scores[i] for i in ids]),
        incumbent=summarize([incumbent.scores[i] for i in ids]),
        per_route={r: sum(v) / len(v) for r, v in sorted(by_route.items())},
    )
