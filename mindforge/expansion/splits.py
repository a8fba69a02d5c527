"""Deterministic train / validation / test splits by task id hash.

A task's split depends only on its id and the salt, never on which other
tasks are present, so a task keeps its split when the pool grows between
cycles, and a rerun (or a resumed run) sees exactly the same splits. Small
pools are topped up so that every split has at least one task: the gate and
the sealed test are never silently empty.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from mindforge.tasks.models import Task

SPLITS = ("train", "validation", "test")


class Splits(BaseModel):
    model_config = ConfigDict(frozen=True)

    train: tuple[Task, ...]
    validation: tuple[Task, ...]
    test: tuple[Task, ...]

    def ids(self) -> dict[str, list[str]]:
        return {name: [t.id for t in getattr(self, name)] for name in SPLITS}


def unit_hash(task_id: str, salt: str = "") -> float:
    """A number in [0, 1) that depends only on the id and salt."""
    digest = hashlib.sha256(f"{salt}|{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_tasks(
    tasks: Sequence[Task], train_fraction: float, test_fraction: float, salt: str = "mf-split"
) -> Splits:
    """Assign each task by its hash; move tasks so no split is empty (needs 3 tasks)."""
    if len(tasks) < 3:
        raise ValueError(f"need at least 3 tasks to split into train/validation/test, got {len(tasks)}")
    ordered = sorted(tasks, key=lambda t: unit_hash(t.id, salt))
    groups: dict[str, list[Task]] = {name: [] for name in SPLITS}
    for t in ordered:
        u = unit_hash(t.id, salt)
        name = "train" if u < train_fraction else "test" if u >= 1.0 - test_fraction else "validation"
        groups[name].append(t)
    for empty in [n for n in SPLITS if not groups[n]]:
        donor = max(SPLITS, key=lambda n: len(groups[n]))
        # The donor's task nearest the empty split's side of [0, 1) moves.
        above = SPLITS.index(donor) > SPLITS.index(empty)
        groups[empty].append(groups[donor].pop(0 if above else -1))
    return Splits(**{n: tuple(groups[n]) for n in SPLITS})
