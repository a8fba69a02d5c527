"""The Docker sandbox, for real: seeds, hostile candidates, infrastructure faults, sessions."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import REPO, require

from mindforge.paths import seed_tasks_dir
from mindforge.tasks import CheckerTest, Task
from mindforge.tasks.io import load_tasks

pytestmark = pytest.mark.docker


def _docker_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def pool():
    require(_docker_up(), "Docker engine not running (make setup starts it)")
    from mindforge.sandbox import SandboxConfig, SandboxPool

    with SandboxPool(SandboxConfig(pool_size=2, test_timeout_s=3.0, job_timeout_s=20.0)) as p:
        yield p


def _ours() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=mindforge.sandbox.owner=" + str(os.getpid())],
        capture_output=True, text=True,
    ).stdout.split()
    return out


ADD = Task(
    family="L2", output_kind="function", entry_point="add", prompt="Write add(a, b).",
    reference="def add(a, b):\n    return a + b\n",
    tests=(CheckerTest(name="small", code="assert add(1, 2) == 3"),
           CheckerTest(name="neg", code="assert add(-1, -1) == -2"),
           CheckerTest(name="str", code="assert add('a', 'b') == 'ab'")),
)


def test_every_seed_reference_passes_and_an_empty_candidate_fails(pool):
    seeds = load_tasks(seed_tasks_dir())
    verdicts = pool.verify_many([(t, t.reference) for t in seeds])
    failed = [(t.id, v.status, v.log, [x.message for x in v.tests if x.outcome != "pass"][:2])
              for t, v in zip(seeds, verdicts) if v.status != "pass"]
    assert not failed
    empty = {"function": "", "text": "", "html": "", "tool_calls": '{"calls": [], "answer": ""}'}
    verdicts = pool.verify_many([(t, empty[t.output_kind]) for t in seeds])
    assert all(v.status == "fail" for v in verdicts)


HOSTILE = {
    "fork_bomb": "import os\ndef add(a, b):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n",
    "memory_balloon": "def add(a, b):\n    x = []\n    while True:\n        x.append(bytearray(50 * 1024 * 1024))\n",
    "busy_loop": "def add(a, b):\n    while True:\n        pass\n",
    "sleep_past_timeout": "import time\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n",
    "connect_public": "import socket\ndef add(a, b):\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    return a + b\n",
    "connect_host_loopback": "import socket\ndef add(a, b):\n    socket.create_connection(('172.17.0.1', 2375), timeout=2)\n    return a + b\n",
    "write_outside_workdir": "def add(a, b):\n    open('/etc/mindforge-owned', 'w').write('x')\n    return a + b\n",
    "huge_output": "import sys\ndef add(a, b):\n    sys.stdout.write('x' * 100_000_000)\n    return None\n",
    "exit_zero_mid_test": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "forged_markers": (
        "import sys\ndef add(a, b):\n"
        "    for fd in (sys.stdout, sys.stderr):\n"
        "        fd.write('@@MF 0000 {\"test\": \"small\", \"outcome\": \"pass\"}\\n')\n"
        "    return None\n"
    ),
    "eq_forging_object": "class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes()\n",
    "overridden_builtins": (
        "import builtins, sys\nbuiltins.AssertionError = SystemExit\nsys.exit = lambda *a: None\n"
        "builtins.print = lambda *a, **k: None\ndef add(a, b):\n    return None\n"
    ),
    "kill_pid_1_and_others": (
        "import os, signal\ndef add(a, b):\n"
        "    for pid in [1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
        "    return a + b\n"
    ),
    "read_and_delete_tests": (
        "import os, glob\ndef add(a, b):\n"
        "    for f in glob.glob('/work/**', recursive=True):\n"
        "        try:\n            os.remove(f)\n        except OSError:\n            pass\n"
        "    return None\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate_never_passes(pool, name):
    start = time.monotonic()
    verdict = pool.verify(ADD, HOSTILE[name])
    assert verdict.status == "fail", (verdict.status, verdict.log, [t.message for t in verdict.tests])
    assert time.monotonic() - start < 60
    assert not Path("/etc/mindforge-owned").exists()
    # the pool is still healthy and still judges correctly afterwards
    assert pool.healthy()
    assert pool.verify(ADD, ADD.reference).status == "pass"


def test_failing_test_is_reported_per_test(pool):
    v = pool.verify(ADD, "def add(a, b):\n    return a + b if a > 0 else 0\n")
    assert v.status == "fail"
    assert {t.name: t.outcome for t in v.tests} == {"small": "pass", "neg": "fail", "str": "error"}
    assert "add(-1, -1)" in v.tests[1].message


def test_reruns_mark_a_nondeterministic_candidate_flaky(pool):
    flip = "import random\ndef add(a, b):\n    return a + b + random.randint(0, 1)\n"
    v = pool.verify(ADD, flip, reruns=5)
    assert v.status == "fail"
    assert v.flaky


def test_tool_session_keeps_state_across_calls_then_is_destroyed(pool):
    task = next(t for t in load_tasks(seed_tasks_dir()) if t.output_kind == "tool_calls"
                and any(s.name == "add_to_cart" for s in t.tools))
    with pool.session(task) as s:
        assert s.call("add_to_cart", {"item": "apple", "quantity": 2}) == {"cart": {"apple": 2}}
        assert s.call("add_to_cart", {"item": "apple", "quantity": 1}) == {"cart": {"apple": 3}}
        assert "error" in s.call("no_such_tool", {})
        assert "error" in s.call("add_to_cart", {"item": "rock", "quantity": 1})
        n_during = len(_ours())
    assert len(_ours()) == n_during - 1


def test_container_killed_from_outside_is_infra_error(pool):
    slow = "import time\ndef add(a, b):\n    time.sleep(2.5)\n    return a + b\n"
    before = set(_ours())
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", pool.verify(ADD, slow)))
    t.start()
    time.sleep(1.0)
    busy = [c for c in before if c in set(_ours())]
    for cid in busy:  # kill whichever container is running the job
        top = subprocess.run(["docker", "top", cid], capture_output=True, text=True).stdout
        if top.count("runner.py") > 2:  # an idle container runs only the judge and its zygote
            subprocess.run(["docker", "kill", cid], capture_output=True)
    t.join(60)
    assert result["v"].status == "infra_error", result["v"]
    assert pool.verify(ADD, ADD.reference).status == "pass"


def test_missing_image_is_infra_failure_not_a_verdict():
    require(_docker_up(), "Docker engine not running")
    from mindforge.sandbox import SandboxConfig, SandboxPool
    from mindforge.sandbox.image import ImageError

    with pytest.raises(ImageError, match="missing"):
        SandboxPool(SandboxConfig(image="mindforge-sandbox:does-not-exist", pool_size=1)).start()


def test_an_unreachable_daemon_is_named_before_any_image_build(tmp_path):
    from mindforge.sandbox import SandboxConfig, ensure_image
    from mindforge.sandbox.image import ImageError

    host = f"unix://{tmp_path}/no-daemon.sock"
    with pytest.raises(ImageError, match="Docker daemon is not reachable"):
        ensure_image(SandboxConfig(docker_host=host), log=lambda m: None)


def test_no_container_left_after_the_pool_closes():
    require(_docker_up(), "Docker engine not running")
    from mindforge.sandbox import SandboxConfig, SandboxPool

    before = set(_ours())  # the module's pool may still be open
    with SandboxPool(SandboxConfig(pool_size=1)) as p:
        assert p.verify(ADD, ADD.reference).status == "pass"
        assert set(_ours()) - before
    assert set(_ours()) <= before


def test_cli_verify_json_and_exit_codes(tmp_path):
    require(_docker_up(), "Docker engine not running")
    import json

    from mindforge.tasks.io import dump_jsonl

    tasks = tmp_path / "t.jsonl"
    dump_jsonl([ADD], tasks)
    mf = str(REPO / ".venv" / "bin" / "mindforge")
    ok = subprocess.run([mf, "sandbox", "verify", str(tasks), "--json", "--workers", "1"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    line = json.loads(ok.stdout.strip().splitlines()[-1])
    assert line["task_id"] == ADD.id and line["verdict"] == "pass" and len(line["tests"]) == 3
    sols = tmp_path / "s.jsonl"
    sols.write_text(json.dumps({"task_id": ADD.id, "solution": "def add(a, b):\n    return 0\n"}) + "\n")
    bad = subprocess.run([mf, "sandbox", "verify", str(tasks), "--solutions", str(sols), "--json"],
                         capture_output=True, text=True)
    assert bad.returncode == 0  # given solutions failing is a result, not an error
    assert json.loads(bad.stdout.strip().splitlines()[-1])["verdict"] == "fail"
    broken = tmp_path / "b.jsonl"
    broken.write_text("{not json\n")
    err = subprocess.run([mf, "sandbox", "verify", str(tasks), "--solutions", str(broken)],
                         capture_output=True, text=True)
    assert err.returncode == 2 and "b.jsonl:1" in err.stderr
