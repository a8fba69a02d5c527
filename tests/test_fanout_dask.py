"""Discovery and Expansion flows on a local Dask cluster of worker processes: the thread runner's results.

Issue 20: no task depends on objects living in the flow's process. Each flow
runs twice on the same real embedded engine and real Docker sandbox: on the
default thread runner (the stage's own thread pool) and on
``make_task_runner("dask")`` with ``LocalCluster(processes=True)``, where every
judgement and every chunk of solves is a ``fan-out`` task that carries its
inputs as data and builds its sandbox pool and harness client in the worker.
The decisions, solve counts and scores must be the same, and the tasks must
have run in the workers, not in the flow's process.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import require
from prefect.testing.utilities import prefect_test_harness

from mindforge.discovery.config import DiscoveryConfig
from mindforge.expansion.config import ExpansionConfig
from mindforge.flows.discovery import discovery_flow
from mindforge.flows.expansion import expansion_flow
from mindforge.flows.task_runners import make_task_runner
from mindforge.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.model]

DASK = {"cluster_kwargs": {"n_workers": 2, "processes": True, "threads_per_worker": 1, "dashboard_address": ":0"}}


def _ready() -> None:
    settings = load_settings()
    require((settings.models_dir / settings.model / "config.json").exists(),
            "the default model is not converted yet (mindforge model pull)")
    require(subprocess.run(["docker", "info"], check=False, capture_output=True).returncode == 0,
            "Docker engine not running")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One embedded engine for both runners (the run's services, as the cycle hands them to each stage)."""
    _ready()
    from mindforge.run_services import open_run_services

    settings = load_settings().model_copy(update={"engine_url": None, "engine_port": 9})
    with prefect_test_harness(server_startup_timeout=180), \
            open_run_services(settings, tmp_path_factory.mktemp("engine-run"), 1) as services:
        yield services


def _both(flow: Any, config: Any, run: Any, tmp_path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for kind, options in (("thread", None), ("dask", DASK)):
        folder = tmp_path / kind
        started = time.monotonic()
        # Each runner writes its own stage folders; both use the run's engine and adapter catalog.
        out[kind] = flow.with_options(task_runner=make_task_runner(kind, 2, options))(
            config.model_copy(update={"run_dir": folder}), run=run)
        print(f"{flow.name} on {kind}: {time.monotonic() - started:.0f}s")
    return out


def _ran_in_workers(result: dict[str, Any]) -> None:
    fanout = result["fanout"]
    assert fanout["tasks"] > 0 and fanout["processes"], fanout
    assert fanout["flow_process"] not in fanout["processes"], fanout


def _leftover_containers(pids: list[int]) -> list[str]:
    import docker

    client = docker.from_env()
    found = client.containers.list(all=True, filters={"label": "mindforge.sandbox"})
    return [c.name for c in found if c.labels.get("mindforge.sandbox.owner") in {str(p) for p in pids}]


def test_discovery_on_dask_process_workers_decides_as_on_threads(run, tmp_path: Path) -> None:
    config = DiscoveryConfig(run_dir=tmp_path, cycle=1, budget=4, proposers=("procedural",), mbpp_dir=None,
                             measure_difficulty=True, min_samples=2, max_samples=2, max_tokens=48)
    got = _both(discovery_flow, config, run, tmp_path)
    thread, dask = got["thread"], got["dask"]
    assert "fanout" not in thread  # the thread runner keeps the stage's own pool
    _ran_in_workers(dask)
    assert 1 <= dask["fanout"]["tasks"] <= 4  # a judgement a candidate that passed the cheap checks

    def decisions(kind: str) -> list[tuple[Any, ...]]:
        from mindforge.discovery.journal import Journal

        journal = Journal(tmp_path / kind / "cycles" / "1" / "discovery" / "journal.jsonl")
        return [(d.index, d.task_id, d.accepted, d.reason, d.passes, d.attempts, d.solve_rate)
                for _, d in sorted(journal.decisions.items())]

    assert thread["accepted"] == dask["accepted"] and thread["rejected"] == dask["rejected"]
    assert [r["id"] for r in thread["accepted_rows"]] == [r["id"] for r in dask["accepted_rows"]]
    assert decisions("thread") == decisions("dask") and len(decisions("dask")) == 4
    assert any(d[5] for d in decisions("dask")), "no candidate was measured: the solver never ran"
    time.sleep(2)  # the workers' pools close as their processes exit
    assert _leftover_containers(dask["fanout"]["processes"]) == []


def test_expansion_on_dask_process_workers_scores_as_on_threads(run, tmp_path: Path) -> None:
    config = ExpansionConfig(run_dir=tmp_path, cycle=1, budget=1, max_tasks=3, samples=1, patience=1,
                             minibatch=1, proposers=("numeric",))
    got = _both(expansion_flow, config, run, tmp_path)
    thread, dask = got["thread"], got["dask"]
    assert "fanout" not in thread
    _ran_in_workers(dask)

    def scores(result: dict[str, Any]) -> dict[str, Any]:
        keep = ("start_hcp", "best_hcp", "stop_reason", "proposals", "candidates", "accepted", "refused",
                "rollouts", "noise_floor", "validation", "test", "changed_paths", "audit_rows")
        rows = [{k: v for k, v in r.items() if "second" not in k} for r in result["candidate_rows"]]
        trajectories = sorted((r["hcp"], r["split"], r["task"], r["route"], r["sample"], r["reward"], r["verdict"],
                               r["tokens"]) for r in result["trajectory_rows"])
        return {**{k: result[k] for k in keep}, "candidate_rows": rows, "trajectories": trajectories}

    assert scores(thread) == scores(dask)
    assert thread["rollouts"] > 0
    time.sleep(2)
    assert _leftover_containers(dask["fanout"]["processes"]) == []


def test_the_eval_on_dask_process_workers_scores_as_on_threads(run, tmp_path: Path) -> None:
    from mindforge.eval.config import EvalConfig
    from mindforge.flows.eval import eval_flow

    config = EvalConfig(run_dir=tmp_path, cycle=0, max_tasks=4, chunk=2)
    got = _both(eval_flow, config, run, tmp_path)
    thread, dask = got["thread"], got["dask"]
    assert "fanout" not in thread
    _ran_in_workers(dask)
    assert dask["fanout"]["tasks"] == 2  # one task a shard of two

    def rows(kind: str) -> list[tuple[Any, ...]]:
        from mindforge.eval.records import EvalRow
        from mindforge.store import read_parquet

        shards = sorted((tmp_path / kind / "evals").rglob("greedy-*.parquet"))
        assert [s.name for s in shards] == ["greedy-0000.parquet", "greedy-0001.parquet"]
        return [(r.task_id, r.route, r.status, r.passed, r.completion_tokens) for s in shards
                for r in read_parquet(s, EvalRow)]

    assert rows("thread") == rows("dask")
    assert thread["pass_at_1"] == dask["pass_at_1"]
    time.sleep(2)
    assert _leftover_containers(dask["fanout"]["processes"]) == []
