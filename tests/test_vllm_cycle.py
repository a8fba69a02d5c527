"""A whole cycle against vLLM's CPU build, started by the project: `mindforge cycle --engine vllm`.

The same small cycle the deployed e2e test runs (Discovery with solve-rate attempts, Expansion,
Update with router training, rejection sampling, GRPO and the hand-off, the sealed eval and its
cycle-0 baseline), every request to vLLM: rollouts with vLLM's token ids, adapters handed over
through /v1/load_lora_adapter under versioned names, the parent unloaded beyond retention.
About 5 minutes on two cores, vLLM's start included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model, pytest.mark.docker]

PARAMS = {
    "cycles": 1,
    "stages": ["discovery", "expansion", "update", "eval"],
    "discovery": {"budget": 4, "min_samples": 2, "max_samples": 2, "max_tokens": 64},
    "expansion": {"budget": 1, "max_tasks": 3, "samples": 1, "patience": 1, "minibatch": 1, "proposers": ["numeric"]},
    "update": {"steps": 1, "group_size": 2, "batch_tasks": 1, "validation_tasks": 1, "validation_samples": 1,
               "max_tokens": 64, "retention": 1, "rft": {"attempts": 2, "max_tasks": 2, "epochs": 1},
               "router": {"train_per_family": 2, "validation_per_family": 1, "epochs": 1}},
    "eval": {"max_tasks": 4},
}


@pytest.mark.timeout(1800)
def test_a_cycle_runs_against_vllm(tmp_path: Path) -> None:
    require_vllm()
    run_dir, params = tmp_path / "run", tmp_path / "params.json"
    params.write_text(json.dumps(PARAMS))
    env = {k: v for k, v in os.environ.items() if k not in ("MINDFORGE_ENGINE_URL", "MINDFORGE_ENGINE_BACKEND")}
    env["MINDFORGE_ENGINE_PORT"] = "9"  # no `mindforge up` engine to reuse: the run starts its own
    proc = subprocess.run([sys.executable, "-m", "mindforge.cli", "cycle", "--run-dir", str(run_dir), "--params",
                           str(params), "--engine", "vllm", "--json"], check=False, cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1700)
    assert proc.returncode == 0, proc.stderr[-4000:]
    [facts] = json.loads(proc.stdout.strip().splitlines()[-1])
    engine_log = (run_dir / "engine.log").read_text(errors="replace")
    assert "vllm.entrypoints.openai.api_server" in engine_log and "starting the vllm engine" in proc.stderr

    assert facts["stages"] == {s: "ran" for s in ("discovery", "expansion", "update", "eval")}, facts
    cycle = run_dir / "cycles" / "1"
    journal = [json.loads(line) for line in (cycle / "discovery" / "journal.jsonl").read_text().splitlines()]
    decided = [r for r in journal if r["type"] == "decision"]
    assert len(decided) == PARAMS["discovery"]["budget"]
    assert sum(r.get("attempts") or 0 for r in decided) > 0, "no solve-rate attempt went through vLLM"
    for stage in ("discovery", "expansion", "update", "eval"):  # vLLM's own counters, read around each stage
        made = json.loads((cycle / stage / "generation.json").read_text())
        assert made["generated_tokens"] > 0 and made["prompt_tokens"] > 0 and made["tokens_per_s"] > 0, (stage, made)
    expansion = json.loads((cycle / "expansion" / "DONE.json").read_text())
    assert expansion["rollouts"] > 0

    update = json.loads((cycle / "update" / "DONE.json").read_text())
    parity = update["parity"]
    print(f"\nvLLM vs trainer, {parity['tokens']} probe tokens: max |logprob diff| {parity['max_abs_diff']:.2e}")
    assert parity["ok"] and parity["max_abs_diff"] < parity["tolerance"] == 1e-3
    assert update["promoted"] and facts["adapter"]["version"] == "mf-L2-v0001", update["reason"]
    assert update["unloaded"] == ["mf-L2-v0000"]  # retention 1: the parent left the engine
    assert "Loaded new LoRA adapter: name 'mf-L2-v0001'" in engine_log
    assert "Removed LoRA adapter: name 'mf-L2-v0000'" in engine_log

    evaluation = facts["eval"]
    assert evaluation["n"] == 4 and evaluation["adapters"]["L2"] == "mf-L2-v0001"
    assert evaluation["vs_cycle0"]["n"] == 4  # the baseline was scored through vLLM too
