"""`mindforge status`, `mindforge cycle` option handling, and `mindforge up`/`down` with a real Prefect server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cycle_standins import BUILDERS, RUNNERS
from helpers import REPO, require
from typer.testing import CliRunner

from mindforge.cli import app
from mindforge.cli.cycle import build_config
from mindforge.cycle import CycleConfig, run_cycle
from mindforge.errors import InputError

runner = CliRunner()


def test_status_summarises_cycles_stages_versions_and_scores(tmp_path: Path) -> None:
    run_cycle(CycleConfig(run_dir=tmp_path), 1, RUNNERS, builders=BUILDERS)
    # Cycle 2 killed after Discovery: reported as not complete, Expansion absent.
    RUNNERS["discovery"](BUILDERS["discovery"](CycleConfig(run_dir=tmp_path), 2, {}))
    (tmp_path / "cycles/2/expansion").mkdir(parents=True)
    out = runner.invoke(app, ["status", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    status = json.loads(out.stdout)
    one, two = status["cycles"]
    assert one["complete"] and not two["complete"] and status["next_cycle"] == 2
    assert one["stages"]["discovery"] == {"state": "done", "trajectories": 0, "tasks": 3, "rejected": None}
    assert one["stages"]["update"]["version"] == "mf-L2-v0001" and one["stages"]["update"]["reward_after"] == 0.5
    assert one["stages"]["expansion"]["best_hcp"] != one["stages"]["expansion"]["start_hcp"]
    assert two["stages"]["expansion"]["state"] == "started" and two["stages"]["update"] == {"state": "absent"}
    human = runner.invoke(app, ["status", str(tmp_path)])
    assert human.exit_code == 0 and "mf-L2-v0001" in human.stdout and "next cycle: 2" in human.stdout
    # What an Update with router training and rejection sampling leaves: both get a line.
    from mindforge.store import RunDir

    marker = RunDir(tmp_path).done_marker(1, "update")
    result = json.loads(marker.read_text())
    result["router"] = {"trained": True, "promoted": True, "accuracy_before": 0.25, "accuracy_after": 0.67,
                        "before": {"L0": 1.0, "L2": 0.0}, "after": {"L0": 0.83, "L2": 1.0}, "seconds": 577.0}
    result["rft"] = {"tasks": 48, "attempts": 192, "passes": 21, "kept": 14, "steps": 4, "spread_tasks": ["a", "b"],
                     "seconds": 300.0}
    marker.write_text(json.dumps(result))
    human = runner.invoke(app, ["status", str(tmp_path)]).stdout
    assert "routing accuracy: 0.250 (L0 1.00, L2 0.00) -> 0.670 (L0 0.83, L2 1.00), promoted" in human
    assert "rejection sampling: 21/192 attempts passed on 48 tasks; 14 answers trained on in 4 steps" in human
    assert json.loads(runner.invoke(app, ["status", str(tmp_path), "--json"]).stdout)["cycles"][0]["stages"][
        "update"]["rft"]["spread_tasks"] == 2
    missing = runner.invoke(app, ["status", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such run directory" in missing.stderr


def test_cycle_options_become_stage_configs(tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"cycles": 2, "expansion": {"budget": 1, "max_tasks": 6}}))
    config = build_config(tmp_path / "run", params, None, None, ["update", "expansion"],
                          ["expansion.samples=2", "update.route=L0", "update.grpo={\"lr\": 1e-5}"])
    assert config.cycles == 2 and config.stages == ("expansion", "update")
    assert config.expansion == {"budget": 1, "max_tasks": 6, "samples": 2}
    assert config.update == {"route": "L0", "grpo": {"lr": 1e-5}}
    with pytest.raises(InputError, match="STAGE.FIELD=VALUE"):
        build_config(tmp_path, None, None, None, None, ["budget=2"])
    bad = runner.invoke(app, ["cycle", "--run-dir", str(tmp_path), "--stage", "expansion", "--set",
                                "expansion.budget=-3"])
    assert bad.exit_code == 2 and "/expansion/budget" in bad.stderr
    params.write_text("[1, 2]")
    bad = runner.invoke(app, ["cycle", "--run-dir", str(tmp_path), "--params", str(params)])
    assert bad.exit_code == 2 and "params.json" in bad.stderr


def test_up_reuses_and_down_stops_a_real_prefect_server(tmp_path: Path) -> None:
    from prefect_stack import free_port

    from mindforge.services import healthy

    port = free_port()
    env = {**os.environ, "MINDFORGE_CACHE_DIR": str(tmp_path / "cache"), "MINDFORGE_PREFECT_PORT": str(port),
           "PREFECT_HOME": str(tmp_path / "prefect-home"), "DO_NOT_TRACK": "1"}
    mf = str(REPO / ".venv" / "bin" / "mindforge")

    def up() -> dict:
        run = subprocess.run([mf, "up", "--only", "prefect", "--json"], check=False, env=env, capture_output=True, text=True,
                             timeout=240)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)[0]

    try:
        first = up()
        assert first["state"] == "started" and healthy(f"http://127.0.0.1:{port}/api/health")
        pidfile = tmp_path / "cache" / "services" / "prefect.pid"
        assert int(pidfile.read_text()) == first["pid"] and Path(first["log"]).is_file()
        again = up()
        assert again["state"] == "reused" and again["pid"] == first["pid"]
    finally:
        down = subprocess.run([mf, "down", "--only", "prefect"], check=False, env=env,
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and "stopped: prefect" in down.stdout
    assert not healthy(f"http://127.0.0.1:{port}/api/health") and not pidfile.exists()


@pytest.mark.model
def test_up_starts_the_embedded_engine_with_the_default_hcps_adapters(tmp_path: Path) -> None:
    from prefect_stack import free_port

    from mindforge.services import healthy
    from mindforge.settings import load_settings

    models = load_settings().models_dir
    require((models / "smollm2-135m-instruct" / "config.json").exists(), "the default model is not converted yet")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models)  # the converted model, without converting it again
    port = free_port()
    env = {**os.environ, "MINDFORGE_CACHE_DIR": str(tmp_path / "cache"), "MINDFORGE_ENGINE_PORT": str(port)}
    mf = str(REPO / ".venv" / "bin" / "mindforge")
    try:
        run = subprocess.run([mf, "up", "--only", "engine", "--json"], env=env, capture_output=True, text=True,
                             timeout=400, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        engine = json.loads(run.stdout)[0]
        assert engine["state"] == "started"
        import httpx

        names = {m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()["data"]}
        assert {"mf-L0-v0000", "mf-L1-v0000", "mf-L2-v0000", "mf-L3-v0000"} <= names
        assert (tmp_path / "cache" / "services" / "adapters" / "L2" / "v0000").is_dir()
    finally:
        down = subprocess.run([mf, "down", "--only", "engine"], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
    assert "stopped: engine" in down.stdout
    assert not healthy(f"http://127.0.0.1:{port}/health")
