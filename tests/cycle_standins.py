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

from mindforge.hcp import hcp_hash, load_hcp
from mindforge.paths import seed_tasks_dir
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
    tasks = load_tasks(seed_tasks_dir())[: 3 * config.cycle]
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


RUNNERS = {"discovery": discovery, "expansion": expansion, "update": update, "eval": lambda c: eval_full(c)}


class DiscoveryConfig:
    """What the stand-in Discovery needs (the real config lives in mindforge.discovery)."""

    def __init__(self, run_dir: Path, cycle: int):
        self.run_dir, self.cycle = Path(run_dir), cycle


BUILDERS = {"discovery": lambda config, cycle, records: DiscoveryConfig(config.run_dir, cycle)}


# ------------------------------------------------------------------ full-shape stand-ins for the flows
def trajectories(task_ids: list[str], hcp_version: str, route: str = "L2") -> list[Any]:
    """Real Trajectory records (one route hop, one answer hop), half of them passing."""
    from mindforge.tasks.models import (
        Hop,
        TestOutcome,
        TestResult,
        Trajectory,
        Verdict,
        VerdictStatus,
    )

    out = []
    for i, task_id in enumerate(task_ids):
        ok = i % 2 == 0
        verdict = Verdict(task_id=task_id, status=VerdictStatus.PASS if ok else VerdictStatus.FAIL,
                          tests=(TestResult(name="test_0", outcome=TestOutcome.PASS if ok else TestOutcome.FAIL,
                                            message="" if ok else "assert add(2, 2) == 4"),))
        hops = (Hop(kind="route", route="L0", adapter="mf-L0-v0000", prompt_ids=(1, 2, 3), completion_ids=(4,),
                    logprobs=(-0.1,), finish_reason="stop", text=f"model_id={route}"),
                Hop(kind="answer", route=route, adapter=f"mf-{route}-v0000", prompt_ids=(1, 2), completion_ids=(5, 6),
                    logprobs=(-0.2, -0.3), finish_reason="stop", text=f"def add(a, b):\n    return a + b  # {i}"))
        out.append(Trajectory(task_id=task_id, hcp_version=hcp_version, route=route, sample=0, seed=i,
                              hops=hops, answer=hops[1].text, verdict=verdict, reward=1.0 if ok else 0.0))
    return out


def expansion_full(config: Any) -> dict[str, Any]:
    """An ExpansionResult of the real shape, with trajectory shards and an HCP that changed."""
    from mindforge.expansion.records import ExpansionResult
    from mindforge.hcp import diff_documents

    base = expansion(config)
    folder = RunDir(config.run_dir).stage(config.cycle, "expansion")
    trs = trajectories([f"t-{config.cycle}{i:015d}" for i in range(4)], base["best_hcp"])
    write_parquet(trs, folder / "trajectories" / "test-0000.parquet")
    from mindforge.expansion.inputs import start_hcp_path

    start_doc = load_hcp(start_hcp_path(config)).to_document()
    best_doc = load_hcp(Path(base["best_hcp_path"])).to_document()
    diff = diff_documents(start_doc, best_doc, "start.hcp.json", "best.hcp.json")
    score = {"mean": 0.5, "se": 0.25, "n": 4}
    result = ExpansionResult(
        cycle=config.cycle, start_hcp=base["start_hcp"], best_hcp=base["best_hcp"],
        start_hcp_path=str(start_hcp_path(config)), best_hcp_path=base["best_hcp_path"],
        stop_reason="budget spent (1 candidate)", stop_kind="budget", proposals=1, candidates=1, accepted=1,
        refused=0, rollouts=8, noise_floor=0.0,
        validation={"start": {**score, "mean": 0.25}, "best": score, "gain": 0.25, "se": 0.1},
        test={"start": {**score, "mean": 0.25}, "best": score, "gain": 0.25, "se": 0.1},
        diff_markdown=diff.markdown(), changed_paths=list(diff.paths),
        candidate_rows=[{"index": 0, "proposer": "scripted", "hash": base["best_hcp"], "decision": "accepted"}],
        trajectory_rows=[], audit_rows=[], files={"trajectories": str(folder / "trajectories")}, elapsed_s=1.0,
    )
    data = result.model_dump(mode="json")
    RunDir(config.run_dir).mark_done(config.cycle, "expansion", data)
    return data


def update_full(config: Any) -> dict[str, Any]:
    from mindforge.update.stage import UpdateResult

    base = update(config)
    folder = RunDir(config.run_dir).stage(config.cycle, "update") / "trajectories"
    trs = trajectories([f"t-{config.cycle}{i:015d}" for i in range(2)], base["hcp"])
    write_parquet(trs, folder / "validation-after.parquet")
    adapter = Path(config.run_dir) / "adapters" / config.route / f"v{config.cycle:04d}"
    adapter.mkdir(parents=True, exist_ok=True)
    result = UpdateResult(
        route=config.route, version=base["version"], candidate=base["candidate"], promoted=True, parity=None,
        reward_before=0.25, reward_after=0.5, se=0.1, se_before=0.2, se_after=0.2, validation_tasks=2,
        hcp=base["hcp"], hcp_path=Path(base["hcp_path"]),
        curve=({"step": 0, "mean_reward": 0.5, "loss": 0.1, "kl": 0.0, "clip_fraction": 0.0, "tokens": 64,
                "groups": 2, "skipped_groups": 0, "dropped": 0, "seconds": 1.0},),
        adapter_path=adapter, trajectories=folder, tasks_source="seed_tasks", tensorboard=folder.parent / "tensorboard",
    )
    data = result.model_dump(mode="json")
    RunDir(config.run_dir).mark_done(config.cycle, "update", data)
    return data


def eval_full(config: Any) -> dict[str, Any]:
    """The real eval stage around a stand-in solver: a cycle passes one more seed task than the one before."""
    from mindforge.eval import run_eval
    from mindforge.eval.stage import EvalServices
    from mindforge.tasks.models import Hop, Trajectory, Verdict, VerdictStatus

    record(config.run_dir, "eval", config.cycle)
    tasks = [t for t in load_tasks(seed_tasks_dir()) if t.output_kind == "function"][:8]
    passing = {t.id for t in tasks[: 2 + config.cycle]}

    class Solver:
        def groups(self, hcp: Any, chunk: Any, samples: int, seed: int, **kw: Any) -> list[list[Any]]:
            out = []
            for t in chunk:
                status = VerdictStatus.PASS if t.id in passing else VerdictStatus.FAIL
                hop = Hop(kind="answer", route="L2" if config.cycle else "L0", adapter="a", prompt_ids=(1,),
                          completion_ids=(2, 3), logprobs=(-0.1, -0.2), finish_reason="stop")
                out.append([Trajectory(task_id=t.id, hcp_version="h", route=hop.route, hops=(hop,),
                                       verdict=Verdict(task_id=t.id, status=status, tests=()))])
            return out

    hcp = load_hcp(RunDir(config.run_dir).hcp_in_force(config.cycle, "eval"))
    services = EvalServices(tasks=tasks, bench_sha="stand-in", hcp=hcp, solver=Solver())
    return run_eval(config, services).model_dump(mode="json")
