"""Solving task sets with an HCP version, cached on disk as trajectory shards.

``Solver`` is the seam to the real world: the production implementation
(``mindforge.expansion.solve.HarnessSolver``) runs every task through the
harness of the given HCP against the engine and verifies the answer in the
sandbox; unit tests substitute a solver of their own.

``Evaluator`` adds what the stage needs on top: every solve is written as one
parquet shard named by (HCP version, split tag, seed, task set), and a shard
on disk is read instead of solving again. That is what makes a killed run
cheap to resume: the decision being taken when it died is taken again from
the same trajectories. Paired comparisons use the same seeds for candidate
and incumbent; the noise floor uses other seeds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from mindforge.errors import MindForgeError
from mindforge.expansion.scores import TaskScores, task_scores
from mindforge.hcp import HCP, hcp_hash
from mindforge.store import read_parquet, write_parquet
from mindforge.tasks.models import Task, Trajectory


@runtime_checkable
class Solver(Protocol):
    """``samples`` rollouts of each task through the harness of ``hcp``, verified and rewarded.

    Returns trajectories with ``hcp_version`` set, ``reward`` None for an
    infrastructure error; sample seeds derive from ``seed``, the task id and
    the sample number.
    """

    def solve(self, hcp: HCP, tasks: Sequence[Task], samples: int, seed: int) -> list[Trajectory]: ...


class Evaluator:
    def __init__(self, solver: Solver, folder: Path, samples: int):
        self.solver, self.folder, self.samples = solver, Path(folder), samples
        self.rollouts_run = 0  # rollouts actually solved by this process (cache misses)
        self.solves = 0

    def shard(self, version: str, tag: str, seed: int, tasks: Sequence[Task]) -> Path:
        ids = hashlib.sha256("|".join(sorted(t.id for t in tasks)).encode()).hexdigest()[:10]
        return self.folder / f"{version}-{tag}-s{seed}-n{self.samples}-{ids}.parquet"

    def trajectories(self, hcp: HCP, tasks: Sequence[Task], tag: str, seed: int) -> list[Trajectory]:
        version = hcp_hash(hcp)
        if not tasks:
            return []
        path = self.shard(version, tag, seed, tasks)
        if path.exists():
            return read_parquet(path, Trajectory)
        got = self.solver.solve(hcp, tasks, self.samples, seed)
        dropped = [t for t in got if t.reward is None and t.meta.get("dropped")]
        if got and len(dropped) == len(got):
            # Nothing was scored: the engine or the sandbox is down, not the HCP bad.
            # Not stored, so a rerun after the fault is fixed solves these again.
            raise MindForgeError(f"all {len(got)} solves of {version} ({tag}) failed before a verdict; "
                                 f"first: {dropped[0].meta['dropped']}")
        self.rollouts_run += len(got)
        self.solves += 1
        write_parquet(got, path)
        return got

    def scores(self, hcp: HCP, tasks: Sequence[Task], tag: str, seed: int) -> TaskScores:
        version = hcp_hash(hcp)
        return task_scores(self.trajectories(hcp, tasks, tag, seed), tasks, version)
