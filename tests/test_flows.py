"""The flows under prefect_test_harness with stand-in stages: subflows, resume, artifacts read back."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import cycle_standins as standins
import pytest
from prefect.testing.utilities import prefect_test_harness

import mindforge.flows.rsi_cycle as rsi
from mindforge.cycle import CycleConfig, next_cycle, runtime
from mindforge.errors import InputError
from mindforge.flows.task_runners import make_task_runner
from mindforge.run_services import RunServices


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def stand_in_stages(monkeypatch):
    """The real flows around stand-in stage functions; no engine, no model, no image."""
    monkeypatch.setattr(runtime, "expansion_runner", lambda run, log, mapper=None: standins.expansion_full)
    monkeypatch.setattr(runtime, "update_runner", lambda run, progress=None, log=None: standins.update_full)
    monkeypatch.setattr(runtime, "eval_runner", lambda run, log, mapper=None: standins.eval_full)
    monkeypatch.setattr(rsi, "prepare", lambda settings: None)

    @contextmanager
    def no_engine(settings, run_dir, cycle, stage="discovery", **kw):
        yield RunServices(run_dir=run_dir, settings=settings, model_path=None, engine_url="http://127.0.0.1:9")

    monkeypatch.setattr(rsi, "open_run_services", no_engine)


def artifacts_by_key(keys: list[str]) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return {a.key: a for a in sorted(found, key=lambda a: a.created)}  # the newest of a key wins


def test_the_cycle_flow_runs_stage_subflows_and_publishes(harness, stand_in_stages, tmp_path: Path) -> None:
    params = CycleConfig(run_dir=tmp_path, cycles=2, stages=("expansion", "update"))
    facts = rsi.rsi_cycle(params)
    assert [f["cycle"] for f in facts] == [1, 2]
    assert facts[1]["hcp_start"] == facts[0]["hcp_after"]
    assert facts[0]["adapter"]["version"] == "mf-L2-v0001" and facts[1]["adapter"]["version"] == "mf-L2-v0002"

    found = artifacts_by_key(["cycle-1-hcp-diff", "cycle-1-summary", "cycle-1-expansion-trajectories",
                              "cycle-1-update-curve", "cycle-1-update-summary", "cycle-2-summary",
                              "cycle-1-expansion-candidates", "cycle-1-adapter", "cycle-1-update-tensorboard"])
    assert set(found) == {"cycle-1-hcp-diff", "cycle-1-summary", "cycle-1-expansion-trajectories",
                          "cycle-1-update-curve", "cycle-1-update-summary", "cycle-2-summary",
                          "cycle-1-expansion-candidates", "cycle-1-adapter", "cycle-1-update-tensorboard"}
    tensorboard = tmp_path / "cycles" / "1" / "update" / "tensorboard"
    assert f"]({tensorboard.resolve().as_uri()})" in found["cycle-1-update-tensorboard"].data  # a markdown link
    diff = found["cycle-1-hcp-diff"].data
    assert "```diff" in diff and "/agents_md" in diff and "+" in diff
    summary = found["cycle-1-summary"].data
    assert "mf-L2-v0001 (promoted)" in summary and "0.25 → 0.5" in summary
    assert "/artifacts/key/cycle-1-hcp-diff" in summary

    import json

    table = found["cycle-1-expansion-trajectories"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert len(rows) == 4 and {r["verdict"] for r in rows} == {"pass", "fail"}
    # Each row leads to the whole trajectory: its page and its dataset shard.
    first = rows[0]
    assert first["dataset"].endswith("test-0000.parquet") and Path(first["dataset"]).is_file()
    assert first["detail"].startswith("/artifacts/artifact/")
    page_key = f"cycle-1-trajectory-{first['trajectory']}"
    page = artifacts_by_key([page_key])[page_key]
    assert first["detail"].endswith(str(page.id))
    assert first["trajectory"] in page.data and "## Hop 1: answer on L2" in page.data and "def add" in page.data


def test_every_cycle_ends_with_the_eval_and_the_ui_gets_its_efficacy(harness, stand_in_stages,
                                                                     tmp_path: Path) -> None:
    params = CycleConfig(run_dir=tmp_path, cycles=2, stages=("expansion", "update", "eval"))
    facts = rsi.rsi_cycle(params)
    assert [f["eval"]["pass@1"] for f in facts] == [3 / 8, 4 / 8]
    assert facts[1]["eval"]["vs_cycle0"]["gained"] == 2 and facts[1]["eval"]["vs_previous"]["gained"] == 1
    keys = ["cycle-0-efficacy", "cycle-2-efficacy", "cycle-2-efficacy-chart", "cycle-2-eval-summary", "cycle-2-summary"]
    found = artifacts_by_key(keys)
    assert set(found) == set(keys)
    table = found["cycle-2-efficacy"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert [r["cycle"] for r in rows] == [0, 1, 2] and rows[2]["pass@1"] == 0.5
    assert "L2 tasks: 100% to L2" in rows[2]["routing"] and "0% to L2" in rows[0]["routing"]
    assert found["cycle-2-efficacy-chart"].type == "image"
    assert found["cycle-2-efficacy-chart"].data.startswith("data:image/svg+xml;base64,")
    assert "pass@1 0.500" in found["cycle-2-summary"].data and "vs cycle 0 +0.250" in found["cycle-2-summary"].data


def run_with_retry(update, params: CycleConfig) -> list[dict]:
    """The rsi-cycle flow with one retry and no delay, Update replaced by ``update``."""
    original = runtime.update_runner
    runtime.update_runner = lambda run, progress=None, log=None: update
    try:
        return rsi.rsi_cycle.with_options(retries=1, retry_delay_seconds=0)(params)
    finally:
        runtime.update_runner = original


def test_a_retried_flow_run_resumes_at_the_stage_that_failed(harness, stand_in_stages, tmp_path: Path) -> None:
    attempts = []

    def update_once_broken(config):
        attempts.append(config.cycle)
        if len(attempts) == 1:
            raise RuntimeError("trainer crashed")
        return standins.update_full(config)

    facts = run_with_retry(update_once_broken, CycleConfig(run_dir=tmp_path, stages=("expansion", "update")))
    assert attempts == [1, 1] and rsi.rsi_cycle.retries == 1
    assert facts[0]["stages"] == {"discovery": "skipped", "expansion": "resumed", "update": "ran", "eval": "skipped"}
    assert len([c for c in standins.calls(tmp_path) if c["stage"] == "expansion"]) == 1


def test_a_retry_runs_the_cycles_the_flow_run_was_asked_for_and_no_more(harness, stand_in_stages,
                                                                         tmp_path: Path) -> None:
    attempts = []

    def update_broken_in_cycle_2(config):
        attempts.append(config.cycle)
        if attempts == [1, 2]:
            raise RuntimeError("trainer crashed")
        return standins.update_full(config)

    facts = run_with_retry(update_broken_in_cycle_2,
                           CycleConfig(run_dir=tmp_path, cycles=2, stages=("expansion", "update")))
    # the retry found cycle 1 complete and cycle 2 begun, and still ran cycles 1..2, not 2..3
    assert attempts == [1, 2, 2] and [f["cycle"] for f in facts] == [1, 2]
    assert next_cycle(tmp_path) == 3


def test_a_rerun_of_the_flow_resumes_instead_of_repeating(harness, stand_in_stages, tmp_path: Path) -> None:
    calls = []

    def broken_update(config):
        calls.append(config.cycle)
        raise RuntimeError("trainer crashed")

    params = CycleConfig(run_dir=tmp_path, stages=("expansion", "update"))
    original = runtime.update_runner
    runtime.update_runner = lambda run, progress=None, log=None: broken_update
    try:
        with pytest.raises(RuntimeError, match="trainer crashed"):
            rsi.rsi_cycle.with_options(retries=0)(params)
    finally:
        runtime.update_runner = original
    assert calls == [1]
    expansions = [c for c in standins.calls(tmp_path) if c["stage"] == "expansion"]
    facts = rsi.rsi_cycle(params)
    assert facts[0]["stages"] == {"discovery": "skipped", "expansion": "resumed", "update": "ran", "eval": "skipped"}
    assert [c for c in standins.calls(tmp_path) if c["stage"] == "expansion"] == expansions


def test_task_runners_are_chosen_by_name() -> None:
    from prefect.task_runners import ThreadPoolTaskRunner

    assert isinstance(make_task_runner("thread", 3), ThreadPoolTaskRunner)
    from prefect_dask import DaskTaskRunner  # a test dependency: the dev extra

    dask = make_task_runner("dask", options={"cluster_kwargs": {"n_workers": 2, "processes": True}})
    assert isinstance(dask, DaskTaskRunner) and dask.cluster_kwargs == {"n_workers": 2, "processes": True}
    with pytest.raises(InputError, match="unknown task runner"):
        make_task_runner("spark")


def test_every_prefect_yaml_entrypoint_loads_from_the_repository_root(monkeypatch) -> None:
    """A worker resolves entrypoints against MINDFORGE_REPO (prefect.yaml's pull step): the checkout's root."""
    import yaml
    from helpers import REPO
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(REPO)
    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]
    loaded = {d["entrypoint"]: load_flow_from_entrypoint(d["entrypoint"]).name for d in deployments}
    assert loaded == {"mindforge/flows/rsi_cycle.py:rsi_cycle": "rsi-cycle",
                      "mindforge/flows/discovery.py:discovery_flow": "discovery",
                      "mindforge/flows/expansion.py:expansion_flow": "expansion",
                      "mindforge/flows/update.py:update_flow": "update"}
