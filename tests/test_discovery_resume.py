"""Killing the Discovery flow midway and rerunning it: no candidate judged twice, none lost.

The flow runs for real in a subprocess (Prefect test server, real sandbox;
difficulty off so no engine is needed) and is SIGKILLed once the journal
holds some decisions. The sandbox pool is wrapped to record which task each
verification was for, so the rerun can be checked to verify only candidates
that had no decision.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.journal import Journal
from mindforge.discovery.output import accepted_tasks

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 16
SCRIPT = r"""
import json, sys
from pathlib import Path
from mindforge.sandbox import pool as sandbox_pool

real = sandbox_pool.SandboxPool.verify_many
record = Path(sys.argv[2])

def verify_many(self, jobs, *args, **kwargs):
    with record.open("a") as fh:
        for task_id in sorted({t.id for t, _ in jobs}):
            fh.write(task_id + "\n")
    return real(self, jobs, *args, **kwargs)

sandbox_pool.SandboxPool.verify_many = verify_many
from prefect.testing.utilities import prefect_test_harness
from mindforge.flows.discovery import discovery_flow
from mindforge.discovery.config import DiscoveryConfig

config = DiscoveryConfig(run_dir=Path(sys.argv[1]), cycle=1, budget=int(sys.argv[3]), measure_difficulty=False,
                         proposers=("procedural",), mbpp_dir=None)
with prefect_test_harness(server_startup_timeout=180):
    result = discovery_flow(config)
print("RESULT " + json.dumps({"accepted": result["accepted"], "candidates": result["candidates"]}))
"""


def _start(run_dir: Path, record: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1"}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(run_dir), str(record), str(BUDGET)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _decisions(run_dir: Path) -> dict[int, str]:
    path = run_dir / "cycles" / "1" / "discovery" / "journal.jsonl"
    return {i: d.task_id for i, d in Journal(path).decisions.items()} if path.exists() else {}


def test_killed_flow_resumes_without_judging_twice_or_losing_any(tmp_path: Path) -> None:
    run_dir, first_record, second_record = tmp_path / "run", tmp_path / "first.txt", tmp_path / "second.txt"
    proc = _start(run_dir, first_record)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        n = len([i for i, tid in _decisions(run_dir).items() if tid])
        if n >= 4:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _decisions(run_dir)
    assert 4 <= len(before) < BUDGET, before

    proc = _start(run_dir, second_record)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])

    after = _decisions(run_dir)
    assert sorted(after) == list(range(BUDGET))  # none lost
    lines = (run_dir / "cycles" / "1" / "discovery" / "journal.jsonl").read_text().splitlines()
    decision_lines = [json.loads(x)["index"] for x in lines if json.loads(x)["type"] == "decision"]
    assert sorted(decision_lines) == list(range(BUDGET))  # each decided exactly once
    reverified = set(second_record.read_text().split()) & {tid for tid in before.values() if tid}
    assert not reverified  # nothing decided before the kill was verified again
    assert result["candidates"] == BUDGET
    config = DiscoveryConfig(run_dir=run_dir, cycle=1, budget=BUDGET, mbpp_dir=None)
    assert len(accepted_tasks(config)) == result["accepted"] == sum(1 for d in Journal(
        run_dir / "cycles" / "1" / "discovery" / "journal.jsonl").decisions.values() if d.accepted)
