"""The real thing: `mindforge cycle` killed during Expansion, rerun, resumes there.

Expansion caches every solve as a parquet shard and journals its decisions;
a rerun of the cycle skips the finished stages and replays Expansion's
journal, so shards written before the kill are reused, not solved again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2e_cycle import stages_built
from helpers import REPO, require

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.model]

ARGS = ["--stage", "expansion", "--set", "expansion.budget=1", "--set", "expansion.max_tasks=3",
        "--set", "expansion.patience=1", "--set", "expansion.minibatch=1", "--set", "expansion.proposers=[\"numeric\"]"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the engine runs in its own process group, so killpg misses it)."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(parent)], capture_output=True, text=True,
                               check=False).stdout.split()
        kids = [int(k) for k in found]
        out += kids
        todo += kids
    return out


@pytest.mark.timeout(3600)
def test_a_cycle_killed_during_expansion_resumes_there(tmp_path: Path) -> None:
    missing = stages_built(("expansion",))
    require(not missing, f"Expansion needs parts not built yet: {', '.join(missing)}")
    run_dir = tmp_path / "run"
    mf = str(REPO / ".venv" / "bin" / "mindforge")
    env = {**os.environ, "MINDFORGE_ENGINE_PORT": "9"}  # never a user's engine
    log = (tmp_path / "first.log").open("wb")
    proc = subprocess.Popen([mf, "cycle", "--run-dir", str(run_dir), *ARGS], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    shards = run_dir / "cycles" / "1" / "expansion" / "trajectories"
    try:
        deadline = time.monotonic() + 900
        while not (shards.is_dir() and any(shards.glob("*.parquet"))):
            assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no solve finished in 15 minutes"
            time.sleep(0.5)
    finally:
        children = descendants(proc.pid)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=60)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards.glob("*.parquet")}
    assert not (run_dir / "cycles/1/expansion/DONE.json").exists()

    done = subprocess.run([mf, "cycle", "--run-dir", str(run_dir), *ARGS, "--json"], env=env,
                          capture_output=True, text=True, timeout=3000, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts[0]["stages"]["expansion"] == "ran"
    assert (run_dir / "cycles/1/expansion/DONE.json").is_file()
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards.glob("*.parquet")}
    # What was solved before the kill is reused as it is.
    assert all(after[name] == value for name, value in before.items())
    assert len(after) >= len(before)
