"""Exclusive runs: real processes contend for one run directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import REPO

from mindforge.runlock import RunLocked, read_holder, run_lock

HOLDER = textwrap.dedent("""
    import sys, time
    from mindforge.runlock import run_lock
    with run_lock(sys.argv[1], command="holder-under-test"):
        print("locked", flush=True)
        time.sleep(120)
""")


def _spawn_holder(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_is_refused_naming_the_holder(tmp_path):
    proc = _spawn_holder(tmp_path)
    try:
        with pytest.raises(RunLocked) as err, run_lock(tmp_path, command="second"):
            pytest.fail("a second writer got the lock")
        assert err.value.holder["pid"] == proc.pid
        assert err.value.holder["host"] == socket.gethostname()
        assert err.value.holder["command"] == "holder-under-test"
        message = str(err.value)
        assert str(tmp_path) in message and f"pid {proc.pid}" in message and "holder-under-test" in message
    finally:
        proc.kill()
        proc.wait()


def test_a_writer_in_another_process_is_refused_while_this_one_holds(tmp_path):
    with run_lock(tmp_path, command="first") as lock:
        assert lock.took_over is None
        probe = "import sys\nfrom mindforge.runlock import run_lock\nwith run_lock(sys.argv[1]):\n    pass\n"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        run = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                             env=env, check=False)
        assert run.returncode != 0
        assert "RunLocked" in run.stderr and f"pid {os.getpid()}" in run.stderr
        # and a second lock in the same process is refused too: flock is per open file
        with pytest.raises(RunLocked), run_lock(tmp_path):
            pass
    # released: the next writer gets it and takes over nothing
    with run_lock(tmp_path) as again:
        assert again.took_over is None
    assert read_holder(tmp_path) is None


def test_stale_lock_of_a_killed_holder_is_taken_over(tmp_path):
    proc = _spawn_holder(tmp_path)
    assert read_holder(tmp_path)["pid"] == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the dead holder's record is still in the file; the kernel dropped its flock
    assert read_holder(tmp_path)["pid"] == proc.pid
    with run_lock(tmp_path, command="successor") as lock:
        assert lock.took_over["pid"] == proc.pid
        assert read_holder(tmp_path) == lock.holder
        assert lock.holder["pid"] == os.getpid() and lock.holder["command"] == "successor"
    assert read_holder(tmp_path) is None


def test_a_record_left_without_a_lock_is_taken_over(tmp_path):
    # e.g. a run directory copied from a machine where its writer crashed
    dead = {"pid": 2**22 + 7, "host": "elsewhere", "command": "mindforge cycle", "started": "2024-01-01T00:00:00+00:00"}
    (tmp_path / ".lock").write_text(json.dumps(dead))
    with run_lock(tmp_path) as lock:
        assert lock.took_over == dead


def test_every_writer_of_a_run_holds_its_lock_through_the_run_services(tmp_path):
    """Stages, the eval and the cycle all open the run's services: a second writer is refused there."""
    from mindforge.run_services import open_run_services
    from mindforge.runlock import RunLocked
    from mindforge.settings import Settings

    settings = Settings(cache_dir=tmp_path / "cache")
    with open_run_services(settings, tmp_path / "run", 1, engine=False):
        with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
            with open_run_services(settings, tmp_path / "run", 1, engine=False):
                pass
    with open_run_services(settings, tmp_path / "run", 2, engine=False):  # released at the end of the block
        pass
