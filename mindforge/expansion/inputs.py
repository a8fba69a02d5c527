"""What Expansion reads: the cycle's tasks and the HCP it starts from.

Tasks, first found: an explicit path (JSONL file or folder, or parquet shards);
the cycle's Discovery output (``cycles/N/discovery/tasks/*.parquet``), joined
by the seed tasks when it holds fewer than the 3 that train, validation and
test need and ``use_seed_tasks`` allows it (a small model's Discovery can
accept only one or two); the seed tasks. A family filter and a task cap
apply after; the cap takes tasks round-robin over families in task-id hash
order, so a small run still sees every family and the same cap always picks
the same tasks.

Start HCP: an explicit file, else the one in force when the cycle's
Expansion starts (``RunDir.hcp_in_force``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mindforge.errors import InputError
from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.splits import unit_hash
from mindforge.paths import seed_tasks_dir
from mindforge.store import RunDir, read_parquet
from mindforge.tasks.io import load_tasks, seed_top_up
from mindforge.tasks.models import Task


def _read_tasks(path: Path) -> list[Task]:
    if not path.exists():
        raise InputError(str(path), "", "no such file or folder of tasks")
    if path.suffix == ".parquet" or (path.is_dir() and any(path.glob("*.parquet"))):
        return read_parquet(path, Task)
    return load_tasks(path)


def cycle_tasks(config: ExpansionConfig) -> tuple[list[Task], str]:
    """The tasks to solve and where they came from (see the module doc)."""
    if config.tasks is not None:
        found, source = _read_tasks(Path(config.tasks)), str(config.tasks)
    else:
        folder = RunDir(config.run_dir).stage(config.cycle, "discovery") / "tasks"
        if folder.is_dir() and any(folder.glob("*.parquet")):
            found, source = read_parquet(folder, Task), str(folder)
        elif config.use_seed_tasks:
            found, source = load_tasks(seed_tasks_dir()), str(seed_tasks_dir())
        else:
            raise InputError(str(folder), "", "no Discovery tasks for this cycle and seed tasks are off; "
                                              "pass --tasks or allow seed tasks")
    if config.families:
        found = [t for t in found if t.family in config.families]
    chosen = cap_tasks(found, config.max_tasks)
    seeds = seed_tasks_dir()
    if config.tasks is None and config.use_seed_tasks and found and source != str(seeds):
        extra = seed_top_up(chosen, 3, seeds, lambda t: not config.families or t.family in config.families)
        if extra:
            room = None if config.max_tasks is None else max(config.max_tasks, 3) - len(chosen)
            chosen, source = [*chosen, *cap_tasks(extra, room)], f"{source} ({len(chosen)} tasks) and the seed tasks"
    if len(chosen) < 3:
        raise InputError(source, "", f"{len(chosen)} tasks after filtering; Expansion needs at least 3 "
                                     "(train, validation and test each need one)")
    return chosen, source


def cap_tasks(tasks: Sequence[Task], cap: int | None) -> list[Task]:
    ordered = sorted(tasks, key=lambda t: unit_hash(t.id, "mf-cap"))
    if cap is None or cap >= len(ordered):
        return ordered
    by_family: dict[str, list[Task]] = {}
    for t in ordered:
        by_family.setdefault(t.family, []).append(t)
    out: list[Task] = []
    while len(out) < cap:
        for fam in sorted(by_family):
            if by_family[fam] and len(out) < cap:
                out.append(by_family[fam].pop(0))
    return out


def start_hcp_path(config: ExpansionConfig) -> Path:
    if config.start_hcp is not None:
        return Path(config.start_hcp)
    return RunDir(config.run_dir).hcp_in_force(config.cycle, "expansion")
