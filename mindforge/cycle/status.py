"""What a run directory holds: cycles, stages, tasks, HCP versions, adapter versions, scores.

Read-only and cheap (JSON markers and parquet footers only), so
``mindforge status RUN_DIR`` works while a cycle is running. A stage folder
without ``DONE.json`` is reported as ``started`` (running now, or killed:
the next run resumes it). Cycle 0, when the run has a baseline eval, is the
first entry of ``cycles``; every cycle's eval is under ``eval`` (the object
``mindforge eval --json`` prints, with its paired comparisons).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mindforge.cycle.core import GENERATION_FILE
from mindforge.errors import InputError
from mindforge.store import STAGES, RunDir


def _rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in sorted(folder.glob("*.parquet"))) if folder.is_dir() else 0


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _stage(run: RunDir, n: int, stage: str) -> dict[str, Any]:
    folder = run.stage(n, stage)
    if run.is_done(n, stage):
        state, result = "done", _read(run.done_marker(n, stage))
    elif folder.exists():
        state, result = "started", {}
    else:
        return {"state": "absent"}
    out: dict[str, Any] = {"state": state, "trajectories": _rows(folder / "trajectories")}
    if gen := _read(folder / GENERATION_FILE):
        out["generation"] = gen
    if stage == "discovery":
        out["tasks"] = _rows(folder / "tasks")
        out["rejected"] = result.get("rejected")
    elif stage == "expansion" and result:
        test = result.get("test") or {}
        out.update(start_hcp=result.get("start_hcp"), best_hcp=result.get("best_hcp"),
                   accepted=result.get("accepted"), candidates=result.get("candidates"),
                   test_start=(test.get("start") or {}).get("mean"), test_best=(test.get("best") or {}).get("mean"),
                   stop=result.get("stop_reason"))
    elif stage == "update" and result:
        out.update(route=result.get("route"), version=result.get("version"), promoted=result.get("promoted"),
                   hcp=result.get("hcp"), reward_before=result.get("reward_before"),
                   reward_after=result.get("reward_after"), se=result.get("se"))
        router, rft = result.get("router") or {}, result.get("rft") or {}
        if router:
            out["router"] = {k: router.get(k) for k in ("trained", "promoted", "accuracy_before", "accuracy_after",
                                                        "before", "after", "seconds")}
        if rft:
            out["rft"] = {"tasks": rft.get("tasks"), "attempts": rft.get("attempts"), "passes": rft.get("passes"),
                          "kept": rft.get("kept"), "steps": rft.get("steps"),
                          "spread_tasks": len(rft.get("spread_tasks") or ()), "seconds": rft.get("seconds"),
                          **({"by_mastery": rft["by_mastery"]} if rft.get("by_mastery") else {})}
    return out


def _catalog(root: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if not root.is_dir():
        return out
    for route_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        names = []
        for version in sorted(p for p in route_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            names.append(_read(version / "metadata.json").get("name", version.name))
        out[route_dir.name] = names
    return out


def run_status(run_dir: Path) -> dict[str, Any]:
    """A JSON-able summary of the run (see the module doc)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(str(run_dir), "", "no such run directory")
    run = RunDir(run_dir)
    from mindforge.cycle.core import eval_summary, next_cycle

    cycles = []
    for n in run.cycles():
        ev = eval_summary(_read(run.done_marker(n, "eval")))
        if n == 0:  # the baseline: an eval of the untouched start, no stages
            cycles.append({"cycle": 0, "baseline": True, "complete": bool(ev), "eval": ev})
            continue
        summary = run.cycle(n) / "summary.json"
        cycles.append({"cycle": n, "complete": summary.is_file(),
                       "stages": {s: _stage(run, n, s) for s in STAGES}, "eval": ev})
    return {"run_dir": str(run_dir), "cycles": cycles, "next_cycle": next_cycle(run_dir),
            "adapters": _catalog(run_dir / "adapters")}
