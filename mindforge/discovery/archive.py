"""The task archive: seeds plus every task Discovery accepted in any cycle.

It is both the pool proposers draw parents and examples from and what
novelty is judged against. Cycle N's own output lives in
``cycles/N/discovery/tasks/*.parquet`` (written once, at the end of the
stage), so "all cycles" is every cycle folder's shards, the current one's
included when a previous attempt finished it.
"""

from __future__ import annotations

from pathlib import Path

from mindforge.discovery.config import DiscoveryConfig
from mindforge.paths import checkout_root, resolve_from_checkout, seed_tasks_dir
from mindforge.store import RunDir
from mindforge.tasks.io import archived_tasks, load_tasks
from mindforge.tasks.models import Task


def seed_tasks(config: DiscoveryConfig) -> list[Task]:
    path = config.seed_tasks or seed_tasks_dir()
    return load_tasks(Path(path))


def task_pool(config: DiscoveryConfig) -> list[Task]:
    """Seeds and earlier cycles' accepted tasks, one entry per id."""
    seen: dict[str, Task] = {}
    for t in [*seed_tasks(config), *archived_tasks(config.run_dir, below=config.cycle)]:
        seen.setdefault(t.id, t)
    return list(seen.values())


def hcp_path(config: DiscoveryConfig) -> Path:
    """The HCP this cycle starts from: configured, else the one in force (``RunDir.hcp_in_force``)."""
    if config.hcp is not None:
        return Path(config.hcp)
    return RunDir(config.run_dir).hcp_in_force(config.cycle, "discovery")


def eval_sources(config: DiscoveryConfig) -> list[Path]:
    """The sealed evaluation sets to decontaminate against (MBPP when present, plus configured ones)."""
    out = [Path(p) for p in config.decontaminate]
    if config.mbpp_dir is None:
        return out
    mbpp = Path(config.mbpp_dir)
    # The default names a folder beside a source checkout: an installed package has none, so there is
    # nothing to add. A relative folder the user configured is refused instead of silently not read.
    if not mbpp.is_absolute() and checkout_root() is None and "mbpp_dir" not in config.model_fields_set:
        return out
    mbpp = resolve_from_checkout(mbpp, "the Discovery setting mbpp_dir")
    if mbpp.exists():
        out.append(mbpp)
    return out
