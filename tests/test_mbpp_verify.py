"""MBPP (the sealed external set) through the CLI: all references pass, every no-op fails."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import REPO, require

pytestmark = [pytest.mark.docker, pytest.mark.slow]
MBPP = REPO.parent / "shared" / "data" / "mbpp" / "sanitized-mbpp.json"
MF = str(REPO / ".venv" / "bin" / "mindforge")


def test_all_mbpp_references_pass_and_noops_fail(tmp_path):
    if not MBPP.exists():
        pytest.skip(f"sealed evaluation set not present at {MBPP}")
    require(subprocess.run(["docker", "info"], capture_output=True).returncode == 0, "Docker engine not running")
    tasks = tmp_path / "mbpp.jsonl"
    subprocess.run([MF, "tasks", "import-mbpp", str(MBPP), "-o", str(tasks)], check=True, capture_output=True)
    refs = subprocess.run([MF, "sandbox", "verify", str(tasks), "--json", "--workers", "2"],
                          capture_output=True, text=True)
    rows = [json.loads(line) for line in refs.stdout.splitlines()]
    assert len(rows) == 427
    assert [r["task_id"] for r in rows if r["verdict"] != "pass"] == []
    assert refs.returncode == 0

    sols = tmp_path / "noop.jsonl"
    with sols.open("w") as fh:
        for line in tasks.read_text().splitlines():
            task = json.loads(line)
            noop = f"def {task['entry_point']}(*args, **kwargs):\n    return None\n"
            fh.write(json.dumps({"task_id": task["id"], "solution": noop}) + "\n")
    noops = subprocess.run([MF, "sandbox", "verify", str(tasks), "--solutions", str(sols), "--json"],
                           capture_output=True, text=True)
    rows = [json.loads(line) for line in noops.stdout.splitlines()]
    assert len(rows) == 427
    assert [r["task_id"] for r in rows if r["verdict"] != "fail"] == []
