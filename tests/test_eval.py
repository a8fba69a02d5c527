"""The eval for real: the sealed benchmark through the production harness, the embedded engine and Docker.

A small fixed subset of MBPP keeps it short on two cores; the full run is
``mindforge eval --run-dir D --cycle 0 --json`` (numbers in the README).
Greedy decoding makes the verdicts deterministic, so a second eval of the
same configuration is read back, not scored again, and the CLI prints the
same object.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, require

from mindforge.tasks.benchmarks import builtin

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.slow]


def _eval(run_dir: Path, *extra: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "mindforge.cli", "eval", "--run-dir", str(run_dir), "--cycle", "0",
                           "--max-tasks", "3", "--json", *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_baseline_eval_scores_mbpp_as_served_and_is_never_scored_twice(tmp_path: Path) -> None:
    require(builtin()["mbpp"].path.is_file(), "the sealed MBPP data is not beside this checkout")
    require(subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0,
            "Docker engine not running")
    first = _eval(tmp_path)
    assert first["n"] == 3 and 0.0 <= first["pass@1"] <= 1.0 and first["bench"] == "mbpp"
    assert "3 of 427" in first["subset"] and not first["reused"]
    assert set(first["routing"]) == {"L2"} and abs(sum(first["routing"]["L2"].values()) - 1.0) < 1e-6
    assert first["adapters"]["L2"] == "mf-L2-v0000" and "vs_previous" not in first

    from mindforge.eval.records import EvalRow
    from mindforge.store import read_parquet

    shards = sorted((tmp_path / "evals" / "mbpp" / first["key"]).glob("greedy-*.parquet"))
    rows = read_parquet(shards, EvalRow)
    assert len(rows) == 3 and all(r.status in ("pass", "fail") for r in rows)
    assert all(r.completion_tokens > 0 and r.route in ("L0", "L1", "L2", "L3") for r in rows)

    again = _eval(tmp_path)
    assert again["reused"] and again["key"] == first["key"]
    assert {k: again[k] for k in ("pass@1", "se", "routing", "n")} == {k: first[k] for k in ("pass@1", "se",
                                                                                             "routing", "n")}
    status = subprocess.run([sys.executable, "-m", "mindforge.cli", "status", str(tmp_path), "--json"], cwd=REPO,
                            capture_output=True, text=True, check=True)
    cycles = json.loads(status.stdout)["cycles"]
    assert cycles[0]["cycle"] == 0 and cycles[0]["eval"]["pass@1"] == first["pass@1"]
