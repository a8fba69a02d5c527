"""Small stand-in stages for the cycle's own logic (order, resume, hand-over).

They write what the real stages write where the cycle reads it (Discovery's
task shards, Expansion's best HCP file, Update's promoted HCP), and count
their calls in ``calls.jsonl`` in the run directory, so a test can tell a
stage that ran from one that was resumed, also across processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from helpers import REPO

from mindforge.hcp import hcp_hash, load_hcp
from mindforge.store import RunDir, atomic_write_text, write_parquet
from mindforge.tasks.io import load_tasks


def record(run_dir: Path, stage: str, cycle: int, **extra: Any) -> None:
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(run_dir) / "calls.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"stage": stage, "cycle": cycle, "pid": os.getpid(), **extra}) + "\n")


def calls(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def discovery(config: Any) -> dict[str, Any]:
    record(config.run_dir, "discovery", config.cycle)
    tasks = load_tasks(REPO / "seed_tasks")[: 3 * config.cycle]
    folder = RunDir(config.run_dir).stage(config.cycle, "discovery") / "tasks"
    write_parquet(tasks, folder / "part-0000.parquet")
    by_family: dict[str, int] = {}
    for t in tasks:
        by_family[t.family] = by_family.get(t.family, 0) + 1
    return {"accepted": len(tasks), "by_family": by_family, "dataset": str(folder)}


def expansion(config: Any, hang_file: Path | None = None) -> dict[str, Any]:
    """Copies the start HCP with a changed instruction; with ``hang_file`` it hangs after touching it."""
    from mindforge.expansion.inputs import start_hcp_path

    record(config.run_dir, "expansion", config.cycle, start=str(start_hcp_path(config)))
    if hang_file is not None:
        Path(hang_file).touch()
        time.sleep(600)
    start = load_hcp(start_hcp_path(config))
    doc = start.to_document()
    doc["agents_md"] += f"\nCycle {config.cycle}: check edge cases."
    folder = RunDir(config.run_dir).stage(config.cycle, "expansion") / "hcp"
    best = folder / f"{hcp_hash(doc)}.hcp.json"
    atomic_write_text(best, json.dumps(doc, indent=2))
    return {"start_hcp": hcp_hash(start), "best_hcp": hcp_hash(doc), "best_hcp_path": str(best),
            "changed_paths": ["/agents_md"], "diff_markdown": "```diff\n+ check edge cases\n```",
            "test": {"start": {"mean": 0.25}, "best": {"mean": 0.5}, "gain": 0.25, "se": 0.1}}


def update(config: Any) -> dict[str, Any]:
    record(config.run_dir, "update", config.cycle, hcp=str(config.hcp))
    doc = load_hcp(config.hcp).to_document()
    doc["router"]["routes"][config.route]["served_adapter"] = f"mf-{config.route}-v{config.cycle:04d}"
    path = RunDir(config.run_dir).stage(config.cycle, "update") / "hcp" / f"{hcp_hash(doc)}.hcp.json"
    atomic_write_text(path, json.dumps(doc, indent=2))
    result = {"route": config.route, "version": f"mf-{config.route}-v{config.cycle:04d}", "promoted": True,
              "candidate": f"mf-{config.route}-v{config.cycle:04d}", "reward_before": 0.25,
              "reward_after": 0.5, "se": 0.1, "hcp": hcp_hash(doc), "hcp_path": str(path),
              "validation_tasks": 4}
    RunDir(config.run_dir).mark_done(config.cycle, "update", result)
    return result


RUNNERS = {"discovery": discovery, "expansion": expansion, "update": update}


class DiscoveryConfig:
    """What the stand-in Discovery needs (the real config lives in mindforge.discovery)."""

    def __init__(self, run_dir: Path, cycle: int):
        self.run_dir, self.cycle = Path(run_dir), cycle


BUILDERS = {"discovery": lambda config, cycle, records: DiscoveryConfig(config.run_dir, cycle)}
