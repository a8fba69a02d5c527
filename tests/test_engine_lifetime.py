"""An engine started by a process that is SIGKILLed shuts itself down (no orphaned engines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.model

STARTER = """
import sys, time
from mindforge.engine.launch import EngineProcess
from mindforge.settings import load_settings
with EngineProcess("smollm2-135m-instruct", {}, settings=load_settings()) as eng:
    print(eng.proc.pid, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[1].split()[0] != "Z"


def test_engine_dies_with_the_process_that_started_it() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    engine_pid = int(starter.stdout.readline())
    assert _alive(engine_pid)
    starter.send_signal(signal.SIGKILL)  # no cleanup runs in the starter
    starter.wait()
    deadline = time.monotonic() + 60
    while _alive(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(engine_pid), "the engine outlived the process that started it"
