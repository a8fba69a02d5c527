"""Docker daemon faults end jobs fast and leave no container behind.

The daemon killed here is a private one this module starts (its own socket,
data root, exec root and containerd namespace), never the system daemon that
other test runs share. The sandbox image is copied into it from the system
daemon, where `make setup` built it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import REPO, require

from mindforge.sandbox import SandboxConfig, SandboxPool
from mindforge.sandbox.container import is_stale
from mindforge.tasks import CheckerTest, Task

LABEL = "mindforge.sandbox"

ADD = Task(
    family="L2", output_kind="function", entry_point="add", prompt="Write add(a, b).",
    reference="import time\ndef add(a, b):\n    time.sleep(0.1)\n    return a + b\n",
    tests=(CheckerTest(name="small", code="assert add(1, 2) == 3"),),
)


class PrivateDaemon:
    """A dockerd of our own under a short temporary folder (unix socket paths are capped at 108 bytes)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mfd-", dir="/tmp"))
        self.host = f"unix://{self.root}/d.sock"
        self.proc: subprocess.Popen | None = None
        self.image = ""

    def start(self) -> None:
        # A killed dockerd's containerd dies with it but stays a zombie until init reaps it; a
        # dockerd started meanwhile takes the zombie for a live containerd and waits in vain.
        pidfile = self.root / "x" / "containerd" / "containerd.pid"
        pid = pidfile.read_text().strip() if pidfile.exists() else ""
        deadline = time.monotonic() + 20
        while pid and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        pidfile.unlink(missing_ok=True)
        argv = ["dockerd", "-H", self.host, "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "x"), "--pidfile", str(self.root / "d.pid"),
                "--bridge=none", "--iptables=false", "--ip-masq=false",
                "--containerd-namespace", "mf-test", "--containerd-plugins-namespace", "mf-test-plugins"]
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while self.docker("info").returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private dockerd did not start: {(self.root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Stop the daemon, restarting it first when a test left it killed, so it stops its containers."""
        if self.proc is not None and self.proc.poll() is not None:
            try:
                self.start()
            except RuntimeError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # stops its containers and its containerd, unmounts its layers
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        """Delete the folder; dockerd leaves its data root bind-mounted on itself."""
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(f"{self.root}/")), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def docker(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], capture_output=True, text=True, check=False,
                              env={**os.environ, "DOCKER_HOST": self.host}, **kw)

    def load(self, tag: str) -> None:
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE,
                                env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"})
        load = self.docker("load", stdin=save.stdout)
        save.wait()
        assert save.returncode == 0 and load.returncode == 0, load.stderr

    def containers(self, *filters: str) -> dict[str, str]:
        """{id: state} of the containers with every label filter given."""
        argv = ["ps", "-a", "--format", "{{.ID}} {{.State}}"]
        for f in filters:
            argv += ["--filter", f"label={f}"]
        out = self.docker(*argv).stdout.split("\n")
        return dict(line.split(" ", 1) for line in out if line.strip())


@pytest.fixture(scope="module")
def daemon():
    require(os.geteuid() == 0 and shutil.which("dockerd") is not None, "needs root and dockerd")
    require(subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0,
            "Docker engine not running (make setup starts it)")
    from mindforge.sandbox import ensure_image

    tag = ensure_image(SandboxConfig(docker_host=None), log=lambda m: None)  # on the system daemon
    d = PrivateDaemon()
    try:
        d.start()
        d.load(tag)
        d.image = tag  # configured explicitly: a pool never starts building it against a dead daemon
        yield d
    finally:
        d.stop()
        d.remove()


@pytest.mark.docker
@pytest.mark.slow
def test_daemon_killed_mid_verification_ends_pending_jobs_fast_and_leaves_nothing(daemon):
    config = SandboxConfig(docker_host=daemon.host, image=daemon.image, pool_size=2, job_timeout_s=20.0,
                           daemon_recheck_s=1.0)
    jobs = [(ADD, ADD.reference)] * 300
    arrived: dict[int, float] = {}
    some_done = threading.Event()

    def progress(i, verdict):
        arrived[i] = time.monotonic()
        if len(arrived) >= 10:
            some_done.set()

    pool = SandboxPool(config)
    pool.start()
    try:
        killed_at: list[float] = []

        def kill_when_running() -> None:
            some_done.wait(120)
            killed_at.append(time.monotonic())
            daemon.kill()

        killer = threading.Thread(target=kill_when_running)
        killer.start()
        verdicts = pool.verify_many(jobs, progress=progress)
        returned_at = time.monotonic()
        killer.join()

        counts = Counter(v.status for v in verdicts)
        assert counts["pass"] >= 10 and set(counts) <= {"pass", "infra_error"}, counts
        assert returned_at - killed_at[0] < 30, f"pending jobs took {returned_at - killed_at[0]:.1f}s to end"
        # In the order verdicts came: passes until the daemon died, then infra_error for every
        # pending job (but for a pass of the pool_size in flight, read just before the death).
        order = [verdicts[i] for i in arrived]
        first = next(n for n, v in enumerate(order) if v.status == "infra_error")
        after = order[first:]
        infra = [v for v in after if v.status == "infra_error"]
        assert len(infra) >= 100 and len(after) - len(infra) < config.pool_size, Counter(v.status for v in after)
        assert all("unreachable" in v.log and daemon.host in v.log for v in infra[config.pool_size:]), infra[-1].log
        assert not pool.healthy()

        daemon.start()  # without live-restore, the restart stops every container it finds
        left = daemon.containers(f"{LABEL}.pool={pool.id}")
        # the pool sees the daemon back within daemon_recheck_s, judges again and reaps what it left
        deadline = time.monotonic() + 30
        while (v := pool.verify(ADD, ADD.reference)).status != "pass" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert v.status == "pass", v.log
        now = daemon.containers(f"{LABEL}.pool={pool.id}")
        assert not set(left) & set(now), (left, now)
        assert all(state == "running" for state in now.values()), now
    finally:
        pool.close()
        if daemon.proc.poll() is not None:
            daemon.start()  # failed between kill and restart: the next tests need it
    assert daemon.containers(LABEL) == {}


CRASHER = textwrap.dedent("""
    import sys, time
    from mindforge.sandbox import SandboxConfig, SandboxPool
    pool = SandboxPool(SandboxConfig(docker_host=sys.argv[1], image=sys.argv[2], pool_size=2))
    pool.start()
    print(pool.id, flush=True)
    time.sleep(300)
""")


@pytest.mark.docker
@pytest.mark.slow
def test_containers_of_a_crashed_process_are_removed_when_a_pool_starts(daemon):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    crasher = subprocess.Popen([sys.executable, "-c", CRASHER, daemon.host, daemon.image], stdout=subprocess.PIPE,
                               text=True, env=env)
    crashed_pool = crasher.stdout.readline().strip()
    crasher.send_signal(signal.SIGKILL)  # no close, no atexit: its containers stay, running
    crasher.wait()
    left = daemon.containers(f"{LABEL}.pool={crashed_pool}")
    assert len(left) == 2 and set(left.values()) == {"running"}, left

    with SandboxPool(SandboxConfig(docker_host=daemon.host, image=daemon.image, pool_size=1)) as pool:
        assert daemon.containers(f"{LABEL}.pool={crashed_pool}") == {}
        assert pool.verify(ADD, ADD.reference).status == "pass"
    assert daemon.containers(LABEL) == {}


@pytest.mark.docker
@pytest.mark.slow
def test_cli_verify_gives_every_solution_line_its_verdict(daemon, tmp_path):
    from mindforge.tasks.io import dump_jsonl

    tasks = tmp_path / "t.jsonl"
    dump_jsonl([ADD], tasks)
    sols = tmp_path / "s.jsonl"
    given = ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return 0\n",
             "def add(a, b):\n    return b + a\n"]
    sols.write_text("".join(json.dumps({"task_id": ADD.id, "solution": s}) + "\n" for s in given))
    env = {**os.environ, "MINDFORGE_DOCKER_HOST": daemon.host,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "mindforge.cli", "sandbox", "verify", str(tasks),
                          "--solutions", str(sols), "--json"],
                         capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(x) for x in run.stdout.splitlines()]
    assert [(x["task_id"], x["line"], x["verdict"]) for x in lines] == [
        (ADD.id, 1, "pass"), (ADD.id, 2, "fail"), (ADD.id, 3, "pass")]


def test_reaper_rules():
    me, host = str(os.getpid()), os.uname().nodename
    ours = {LABEL: "1", f"{LABEL}.owner": me, f"{LABEL}.host": host, f"{LABEL}.pool": "p1"}
    assert not is_stale(ours, "running", LABEL, {"p1"})
    assert is_stale(ours, "running", LABEL, set())  # a pool of ours that closed while the daemon was away
    assert is_stale(ours, "exited", LABEL, {"p1"})  # a stopped container serves nobody
    elsewhere = {**ours, f"{LABEL}.host": host + "-other", f"{LABEL}.owner": "1"}
    assert not is_stale(elsewhere, "running", LABEL, set())  # another machine's process: left alone
    parent = {**ours, f"{LABEL}.owner": str(os.getppid())}
    assert not is_stale(parent, "running", LABEL, set())
    assert is_stale({**parent, f"{LABEL}.owner_start": "1"}, "running", LABEL, set())  # pid reused
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert is_stale({**ours, f"{LABEL}.owner": str(dead.pid)}, "running", LABEL, set())
