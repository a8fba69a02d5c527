"""What the Update stage reads: the cycle's tasks for a route and the HCP to start from.

Tasks: the cycle's Discovery output (verified by construction) when there is
any for the route, joined by the seed tasks of that family when it holds
fewer than ``want`` (validation plus one step's tasks: a train split of one
task gives one group a step, often with no reward spread), otherwise the seed
tasks of that family (each seed is checked against its reference in the
sandbox by the seed tests). The split
into training and validation tasks is by a hash of the task id and the
seed, so it does not depend on file order and a rerun splits the same way.

HCP: an explicit file, else the one in force when the cycle's Update starts
(Expansion's best of this cycle, else what earlier cycles left).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mindforge.paths import seed_tasks_dir
from mindforge.store import RunDir, read_parquet
from mindforge.tasks.io import archived_tasks, load_tasks, seed_top_up
from mindforge.tasks.models import Task


def cycle_tasks(run: RunDir, cycle: int, route: str, seeds: Path | None = None,
                want: int = 0) -> tuple[list[Task], str]:
    """Tasks of ``route`` for the cycle and where they came from (see the module doc)."""
    folder = run.stage(cycle, "discovery") / "tasks"
    source = Path(seeds) if seeds is not None else seed_tasks_dir()
    if folder.is_dir() and any(folder.glob("*.parquet")):
        found = [t for t in read_parquet(folder, Task) if t.family == route]
        if found:
            extra = seed_top_up(found, want, source, lambda t: t.family == route)
            return [*found, *extra], f"{folder} ({len(found)} tasks) and {source}" if extra else str(folder)
    return [t for t in load_tasks(source) if t.family == route], str(source)


def archive_tasks(run: RunDir, cycle: int, families: tuple[str, ...], seeds: Path | None = None
                  ) -> tuple[list[Task], str]:
    """Every task of ``families`` the run holds up to ``cycle``: Discovery's accepted tasks of all cycles
    (the archive grows, and Update samples from all of it) and the seed tasks; one entry per id."""
    source = Path(seeds) if seeds is not None else seed_tasks_dir()
    found = [t for t in archived_tasks(run.root, below=cycle + 1) if t.family in families]
    seen: dict[str, Task] = {}
    for t in [*found, *(t for t in load_tasks(source) if t.family in families)]:
        seen.setdefault(t.id, t)
    return list(seen.values()), f"{len(found)} discovered task(s) of cycles <= {cycle} and {source}"


def solve_rate(task: Task) -> float | None:
    """The model's measured solve rate when Discovery accepted the task (None: never measured, e.g. a seed)."""
    rate = task.provenance.extra.get("solve_rate")
    return float(rate) if isinstance(rate, int | float) else None


def learnable(task: Task) -> bool:
    """Measured inside (0, 1): some attempts pass and some fail, so there is something to learn from and
    a change to see. Seeds written for larger models are often never solved by a small one."""
    rate = solve_rate(task)
    return rate is not None and 0.0 < rate < 1.0


def split(tasks: list[Task], validation: int, seed: int) -> tuple[list[Task], list[Task]]:
    """(train, validation): ``validation`` tasks held out by hashed id order, learnable tasks (``learnable``)
    and the rest in proportion, so that a validation of unsolvable seeds does not read 0 before and after
    whatever the training did. Learnable tasks lead the training list."""
    ranked = sorted(tasks, key=lambda t: hashlib.sha256(f"{seed}|{t.id}".encode()).hexdigest())
    held_n = validation if validation < len(ranked) else max(len(ranked) - 1, 0)
    good = [t for t in ranked if learnable(t)]
    rest = [t for t in ranked if not learnable(t)]
    from_good = min(len(good) - 1 if len(good) > 1 else 0, max(round(held_n * len(good) / max(len(ranked), 1)),
                                                                1 if len(good) > 1 else 0))
    held = good[:from_good] + rest[: held_n - from_good]
    if len(held) < held_n:  # too few others: the rest from the learnable ones
        held += good[from_good: from_good + held_n - len(held)]
    held_ids = {t.id for t in held}
    return [t for t in good + rest if t.id not in held_ids], held


def current_hcp_path(run: RunDir, cycle: int, explicit: Path | None = None) -> Path:
    """The HCP this Update starts from: ``explicit``, else the one in force (``RunDir.hcp_in_force``)."""
    return Path(explicit) if explicit is not None else run.hcp_in_force(cycle, "update")
