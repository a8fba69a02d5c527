"""The task archive: seeds plus every task Discovery accepted in any cycle.

It is both the pool proposers draw parents and examples from and what
novelty is judged against. Cycle N's own output lives in
``cycles/N/discovery/tasks/*.parquet`` (written once, at the end of the
stage), so "all cycles" is every cycle folder's shards, the current one's
included when a previous attempt finished it.
"""

from __future__ import annotations

import json
from pathlib import Path

from mindforge.discovery.config import DiscoveryConfig
from mindforge.store import RunDir, read_parquet
from mindforge.tasks.io import load_tasks
from mindforge.tasks.models import Task


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def seed_tasks(config: DiscoveryConfig) -> list[Task]:
    path = config.seed_tasks or repo_root() / "seed_tasks"
    return load_tasks(Path(path))


def archived_tasks(run_dir: Path, below: int | None = None) -> list[Task]:
    """Tasks accepted by Discovery in every cycle of the run (cycles < ``below`` when given)."""
    run = RunDir(run_dir)
    out: list[Task] = []
    for n in run.cycles():
        if below is not None and n >= below:
            continue
        folder = run.stage(n, "discovery") / "tasks"
        if folder.is_dir() and any(folder.glob("*.parquet")):
            out.extend(read_parquet(folder, Task))
    return out


def task_pool(config: DiscoveryConfig) -> list[Task]:
    """Seeds and earlier cycles' accepted tasks, one entry per id."""
    seen: dict[str, Task] = {}
    for t in [*seed_tasks(config), *archived_tasks(config.run_dir, below=config.cycle)]:
        seen.setdefault(t.id, t)
    return list(seen.values())


def hcp_path(config: DiscoveryConfig) -> Path:
    """The HCP this cycle starts from: configured, else what the last cycle left, else the default."""
    if config.hcp is not None:
        return Path(config.hcp)
    run = RunDir(config.run_dir)
    for n in sorted((c for c in run.cycles() if c < config.cycle), reverse=True):
        for stage, key in (("update", "hcp_path"), ("expansion", "best_hcp_path")):
            marker = run.done_marker(n, stage)
            if marker.is_file():
                path = json.loads(marker.read_text(encoding="utf-8")).get(key)
                if path and Path(path).is_file():
                    return Path(path)
    return repo_root() / "hcp" / "examples" / "default.hcp.json"


def eval_sources(config: DiscoveryConfig) -> list[Path]:
    """The sealed evaluation sets to decontaminate against (MBPP when present, plus configured ones)."""
    out = [Path(p) for p in config.decontaminate]
    if config.mbpp_dir is not None:
        mbpp = Path(config.mbpp_dir)
        if not mbpp.is_absolute():
            mbpp = (repo_root() / mbpp).resolve()
        if mbpp.exists():
            out.append(mbpp)
    return out
