"""The cycle's own logic with stand-in stages: order, hand-over between stages and cycles, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cycle_standins as standins
import pytest
from cycle_standins import BUILDERS, RUNNERS
from helpers import REPO

from mindforge.cycle import CycleConfig, load_cycle_config, next_cycle, run_cycle, run_cycles
from mindforge.errors import InputError
from mindforge.hcp import hcp_hash, load_hcp
from mindforge.paths import default_hcp_path
from mindforge.store import RunDir


def test_one_cycle_runs_the_stages_in_order_and_hands_the_hcp_on(tmp_path: Path) -> None:
    result = run_cycle(CycleConfig(run_dir=tmp_path), 1, RUNNERS, builders=BUILDERS)
    assert [c["stage"] for c in standins.calls(tmp_path)] == ["discovery", "expansion", "update", "eval"]
    assert {k: v.status for k, v in result.stages.items()} == dict.fromkeys(
        ("discovery", "expansion", "update", "eval"), "ran")
    assert result.eval["pass@1"] == 3 / 8 and result.eval["vs_previous"] is None  # no baseline in this run
    # Update starts from the HCP Expansion chose in the same cycle.
    update_call = standins.calls(tmp_path)[2]
    assert update_call["hcp"] == result.stages["expansion"].result["best_hcp_path"]
    assert result.tasks_accepted == 3 and result.archive_tasks == 3
    assert result.hcp_start == hcp_hash(load_hcp(default_hcp_path()))
    assert result.hcp_after == result.stages["update"].result["hcp"] != result.hcp_best
    assert result.adapter["version"] == "mf-L2-v0001" and result.validation["reward_after"] == 0.5
    stored = json.loads((tmp_path / "cycles/1/summary.json").read_text())
    assert stored["adapter"]["promoted"] is True
    for stage in ("discovery", "expansion", "update"):
        assert RunDir(tmp_path).is_done(1, stage)


def test_the_next_cycle_starts_from_what_the_last_one_left(tmp_path: Path) -> None:
    results = run_cycles(CycleConfig(run_dir=tmp_path, cycles=2), RUNNERS, builders=BUILDERS)
    assert [r.cycle for r in results] == [1, 2]
    # The cycle-0 baseline is scored once, first; each cycle is paired with it and with the one before.
    assert [(c["stage"], c["cycle"]) for c in standins.calls(tmp_path)][0] == ("eval", 0)
    assert results[1].eval["vs_previous"]["gained"] == 1 and results[1].eval["vs_cycle0"]["gained"] == 2
    from mindforge.cycle.status import run_status

    status = run_status(tmp_path)
    assert [c["cycle"] for c in status["cycles"]] == [0, 1, 2] and status["cycles"][0]["baseline"]
    assert status["cycles"][2]["eval"]["vs_cycle0"]["diff"] == 2 / 8
    second_expansion = [c for c in standins.calls(tmp_path) if c["stage"] == "expansion"][1]
    assert second_expansion["start"] == results[0].stages["update"].result["hcp_path"]
    assert results[1].hcp_start == results[0].hcp_after
    assert results[1].archive_tasks == 3 + 6  # cycle 1's tasks stay in the archive
    assert next_cycle(tmp_path) == 3
    # A finished run asked again reads its summaries; nothing runs.
    before = len(standins.calls(tmp_path))
    again = run_cycles(CycleConfig(run_dir=tmp_path, cycles=2, first_cycle=1), RUNNERS, builders=BUILDERS)
    assert [r.hcp_after for r in again] == [r.hcp_after for r in results]
    assert len(standins.calls(tmp_path)) == before


def test_eval_at_ends_scores_the_baseline_and_the_last_cycle_wider_than_the_cycles_between(tmp_path: Path) -> None:
    config = CycleConfig(run_dir=tmp_path, cycles=3, eval={"max_tasks": 3}, eval_at_ends={"max_tasks": None})
    results = run_cycles(config, RUNNERS, builders=BUILDERS)
    from mindforge.cycle.status import run_status

    evals = {c["cycle"]: c["eval"] for c in run_status(tmp_path)["cycles"]}
    assert [evals[c]["n"] for c in (0, 1, 2, 3)] == [8, 3, 3, 8]
    assert "subset" not in evals[0] and "subset" not in evals[3] and "3 of 8" in evals[1]["subset"]
    # every comparison pairs the tasks both evals scored
    assert results[0].eval["vs_cycle0"]["n"] == 3 and results[2].eval["vs_previous"]["n"] == 3
    assert results[2].eval["vs_cycle0"]["n"] == 8 and results[2].eval["vs_cycle0"]["gained"] == 3
    with pytest.raises(InputError, match="/eval_at_ends/max_tasks"):
        run_cycles(CycleConfig(run_dir=tmp_path / "bad", eval_at_ends={"max_tasks": 0}), RUNNERS, builders=BUILDERS)


def test_a_failed_stage_is_where_the_rerun_starts(tmp_path: Path) -> None:
    def broken(config):
        raise RuntimeError("engine went away")

    with pytest.raises(RuntimeError, match="engine went away"):
        run_cycle(CycleConfig(run_dir=tmp_path), 1, {**RUNNERS, "expansion": broken},
                  builders=standins.BUILDERS)
    assert RunDir(tmp_path).is_done(1, "discovery") and not RunDir(tmp_path).is_done(1, "expansion")
    assert not (tmp_path / "cycles/1/summary.json").exists()
    result = run_cycle(CycleConfig(run_dir=tmp_path), 1, RUNNERS, builders=BUILDERS)
    assert [c["stage"] for c in standins.calls(tmp_path)] == ["discovery", "expansion", "update", "eval"]
    assert result.stages["discovery"].status == "resumed"
    assert result.stages["expansion"].status == "ran"
    assert result.tasks_accepted == 3  # the resumed stage's stored result still feeds the summary


def test_without_discovery_the_stage_is_skipped(tmp_path: Path) -> None:
    result = run_cycle(CycleConfig(run_dir=tmp_path, stages=("update", "expansion")), 1, RUNNERS, builders=BUILDERS)
    assert result.stages["discovery"].status == "skipped"
    assert [c["stage"] for c in standins.calls(tmp_path)] == ["expansion", "update"]
    assert result.tasks_accepted is None


def test_bad_stage_fields_are_refused_before_any_work(tmp_path: Path) -> None:
    config = CycleConfig(run_dir=tmp_path, stages=("expansion", "update"), expansion={"budget": -1})
    with pytest.raises(InputError, match=r"/expansion/budget"):
        run_cycle(config, 1, RUNNERS, builders=BUILDERS)
    with pytest.raises(InputError, match=r"/update/nonsense"):
        run_cycle(CycleConfig(run_dir=tmp_path, stages=("update",), update={"nonsense": 1}), 1, RUNNERS, builders=BUILDERS)
    assert standins.calls(tmp_path) == []
    with pytest.raises(InputError, match=r"params.json:/expansion"):
        load_cycle_config("params.json", {"run_dir": str(tmp_path), "expansion": {"cycle": 3}})
    with pytest.raises(InputError, match=r"params.json:/cycles"):
        load_cycle_config("params.json", {"run_dir": str(tmp_path), "cycles": 0})


_KILLED_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import cycle_standins as s
from mindforge.cycle import CycleConfig, run_cycle
hang = Path({hang!r})
runners = {{**s.RUNNERS, "expansion": lambda c: s.expansion(c, hang_file=hang)}}
run_cycle(CycleConfig(run_dir=Path({run!r})), 1, runners, builders=s.BUILDERS)
"""


def test_killing_a_cycle_during_expansion_and_rerunning_resumes_there(tmp_path: Path) -> None:
    run_dir, hang = tmp_path / "run", tmp_path / "expansion-started"
    script = _KILLED_SCRIPT.format(tests=str(REPO / "tests"), hang=str(hang), run=str(run_dir))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not hang.exists():
            assert proc.poll() is None, "the cycle process ended before reaching Expansion"
            assert time.monotonic() < deadline, "Expansion never started"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert RunDir(run_dir).is_done(1, "discovery") and not RunDir(run_dir).is_done(1, "expansion")

    result = run_cycle(CycleConfig(run_dir=run_dir), 1, RUNNERS, builders=BUILDERS)
    stages = [(c["stage"], c["pid"] == os.getpid()) for c in standins.calls(run_dir)]
    # Discovery ran once, in the killed process; Expansion starts over here, then Update.
    assert stages == [("discovery", False), ("expansion", False), ("expansion", True), ("update", True), ("eval", True)]
    assert result.stages["discovery"].status == "resumed"
    assert result.stages["expansion"].status == "ran" and result.stages["update"].status == "ran"


@pytest.mark.parametrize("name", ["embedded", "scheduled", "efficacy"])
def test_every_cycle_deployment_of_prefect_yaml_builds_valid_stage_configs(name: str, tmp_path: Path) -> None:
    import yaml

    from mindforge.cycle.config import validate_stage_configs

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    params = next(d for d in spec["deployments"] if d["name"] == name)["parameters"]["params"]
    config = load_cycle_config(f"prefect.yaml deployment {name}", {**params, "run_dir": str(tmp_path)})
    for cycle in range(1, config.cycles + 1):
        validate_stage_configs(config, cycle)
    if name == "efficacy":  # the efficacy run's levers are on, at the sizes its 90 minutes allow
        from mindforge.cycle.config import eval_config, update_config

        update = update_config(config, 1)
        assert config.cycles == 3 and "eval" in config.stages
        assert update.rft.enabled and update.router.enabled and update.tasks == "archive"
        # judged on the whole sealed benchmark at the baseline and the last cycle, a subset between
        pinned = config.model_copy(update={"first_cycle": 1})
        assert [eval_config(pinned, c).max_tasks for c in (0, 1, 2, 3)] == [None, 100, 100, None]


def test_each_stage_records_what_the_engine_generated_during_it(tmp_path: Path) -> None:
    """The meter reads the engine's counters before and after a stage; a stage that did not run records nothing."""
    reads = iter(range(100))

    def meter() -> dict[str, float]:  # each read: 100 more generated tokens, 1000 more prompt tokens
        n = next(reads)
        return {"generated_tokens": 100.0 * n, "prompt_tokens": 1000.0 * n}

    result = run_cycle(CycleConfig(run_dir=tmp_path, stages=("discovery", "expansion")), 1, RUNNERS,
                       builders=BUILDERS, meter=meter)
    gen = result.stages["discovery"].generation
    assert gen["generated_tokens"] == 100 and gen["prompt_tokens"] == 1000
    assert gen["tokens_per_s"] == round(100 / gen["seconds"], 2)
    assert result.stages["update"].generation is None  # skipped
    from mindforge.cycle.status import run_status

    stages = run_status(tmp_path)["cycles"][0]["stages"]
    assert stages["expansion"]["generation"]["generated_tokens"] == 100 and "generation" not in stages["update"]
    stored = json.loads((tmp_path / "cycles/1/summary.json").read_text())
    assert stored["stages"]["discovery"]["generation"] == gen
    # an engine without counters (a remote one without /metrics): nothing recorded, nothing fails
    again = run_cycle(CycleConfig(run_dir=tmp_path / "other", stages=("discovery",)), 1, RUNNERS, builders=BUILDERS,
                      meter=lambda: None)
    assert again.stages["discovery"].generation is None


def test_a_stage_summary_says_where_the_engines_time_went() -> None:
    """With the embedded engine's busy-time counters the line splits decode from prefill; without them
    (vLLM) it says only what was generated."""
    from mindforge.cycle.core import generation, generation_line

    before = {"generated_tokens": 1000.0, "prompt_tokens": 5000.0, "decode_steps": 10.0, "decode_rows": 300.0,
              "decode_seconds": 4.0, "prefill_seconds": 1.0, "prefill_tokens": 800.0}
    after = {"generated_tokens": 5270.0, "prompt_tokens": 65000.0, "decode_steps": 110.0, "decode_rows": 4300.0,
             "decode_seconds": 34.0, "prefill_seconds": 11.5, "prefill_tokens": 4800.0}
    gen = generation(before, after, 50.0)
    assert gen["decode_steps"] == 100 and gen["decode_rows"] == 4000 and gen["prefill_seconds"] == 10.5
    assert generation_line(gen) == (
        "generated 4,270 tokens at 85.4 tok/s (60,000 prompt tokens); engine busy 40 of 50 s: "
        "decode 30 s (100 steps, mean batch 40.0), prefill 10 s (4,000 prompt tokens computed)")
    tokens_only = generation({"generated_tokens": 0.0, "prompt_tokens": 0.0},
                             {"generated_tokens": 10.0, "prompt_tokens": 20.0}, 2.0)
    assert set(tokens_only) == {"generated_tokens", "prompt_tokens", "seconds", "tokens_per_s"}
    assert generation_line(tokens_only) == "generated 10 tokens at 5.0 tok/s (20 prompt tokens)"
