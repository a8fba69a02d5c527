"""One sandbox container: started with every limit, fed through the Docker API.

Limits on every container: no network, read-only root, a size-capped tmpfs
``/work`` (the only writable folder besides a small ``/tmp``), memory with
swap capped at the same value, a CPU quota, a PID limit, no-new-privileges,
all capabilities dropped, a non-root user, and a wall-clock kill per job.
Files go in on the stdin of an exec, through the Docker API (the engine
refuses ``put_archive`` on a read-only root even for a tmpfs path); no host
folder is mounted and the Docker socket is never inside. The checker tests
thus never touch the container's filesystem at all. PID 1 is ``sleep infinity``: signals from inside the
container cannot kill it (the kernel ignores them for a namespace's init
without handlers), so a job cannot take the container down.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mindforge.procs import pid_alive
from mindforge.sandbox.config import SandboxConfig

RUNNER = "/opt/mindforge/runner.py"


def docker_client(host: str | None = None, timeout: float = 120):
    """A client of the daemon at ``host`` (None: DOCKER_HOST or the SDK's default socket)."""
    import docker

    if host:
        return docker.DockerClient(base_url=host, timeout=timeout)
    return docker.from_env(timeout=timeout)


def probe(host: str | None, timeout_s: float) -> str | None:
    """None when the daemon answers a ping within ``timeout_s``; else why not, in words."""
    try:
        docker_client(host, timeout=timeout_s).ping()
    except Exception as exc:  # noqa: BLE001 - refused, timed out, socket gone: all mean unreachable
        return f"Docker daemon at {host or 'the default socket'} unreachable: {type(exc).__name__}: {exc}"
    return None


def owner_labels(label: str, pool_id: str) -> dict[str, str]:
    """Labels naming who started a container, so the reaper can tell whether it still has an owner.

    A pid alone is not enough: after a crash the pid may be reused (hence the
    process's start time), the daemon may serve several machines (hence the
    host), and a process may close a pool while the daemon is down and open
    another (hence the pool id).
    """
    pid = os.getpid()
    return {label: "1", f"{label}.owner": str(pid), f"{label}.owner_start": _start_time(pid),
            f"{label}.host": socket.gethostname(), f"{label}.pool": pool_id}


def start_container(client, image: str, config: SandboxConfig, labels: dict[str, str]):
    uid, gid = config.user.split(":")
    return client.containers.run(
        image,
        command=["sleep", "infinity"],
        detach=True,
        network_mode="none",
        read_only=True,
        tmpfs={
            "/work": f"rw,nosuid,nodev,size={config.workdir_size},uid={uid},gid={gid},mode=0700",
            "/tmp": f"rw,nosuid,nodev,size=16m,uid={uid},gid={gid},mode=0700",
        },
        mem_limit=config.memory,
        memswap_limit=config.memory,
        nano_cpus=int(config.cpus * 1e9),
        pids_limit=config.pids,
        security_opt=["no-new-privileges"],
        cap_drop=["ALL"],
        user=config.user,
        labels=labels,
        shm_size="16m",
    )


class CappedOutput:
    """Output kept up to ``cap`` bytes; the rest is read and dropped, and that is reported."""

    def __init__(self, cap: int):
        self.cap, self.size, self.truncated = cap, 0, False
        self._parts: list[bytes] = []

    def add(self, data: bytes) -> None:
        room = self.cap - self.size
        if room > 0:
            self._parts.append(data[:room])
        self.truncated |= len(data) > room
        self.size += len(data)

    def text(self) -> str:
        return b"".join(self._parts).decode("utf-8", "replace")


@dataclass
class ExecResult:
    stdout: str
    exit_code: int | None
    timed_out: bool
    truncated: bool
    duration_s: float


def run_exec(client, container, argv: list[str], timeout_s: float, cap: int, user: str,
             stdin: bytes = b"") -> ExecResult:
    """Run ``argv`` in the container with ``stdin``; kill the container past ``timeout_s``.

    Output beyond ``cap`` bytes is read and dropped (so the process never
    blocks on a full pipe) and reported as truncated.
    """
    from docker.utils.socket import frames_iter

    api = client.api
    exec_id = api.exec_create(container.id, argv, user=user, workdir="/work", stdin=True,
                              stdout=True, stderr=True)["Id"]
    timed_out = threading.Event()
    finished = threading.Event()

    def watchdog() -> None:
        if not finished.wait(timeout_s):
            timed_out.set()
            try:
                container.kill()
            except Exception:  # noqa: BLE001 - the container may already be gone
                pass

    threading.Thread(target=watchdog, daemon=True).start()
    start = time.monotonic()
    out = CappedOutput(cap)
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(stdin)
        raw.shutdown(socket.SHUT_WR)
        for stream, chunk in frames_iter(sock, tty=False):
            if stream != 1:
                continue  # stderr: the runner writes nothing there that decides anything
            out.add(chunk)
    except OSError:
        pass  # the container was killed under us; the caller inspects its state
    finally:
        finished.set()
        try:
            sock.close()
        except OSError:
            pass
    code = api.exec_inspect(exec_id).get("ExitCode")
    return ExecResult(
        stdout=out.text(),
        exit_code=code,
        timed_out=timed_out.is_set(),
        truncated=out.truncated,
        duration_s=time.monotonic() - start,
    )


class JudgeSession:
    """A judge that stays up in a warm container and takes one job a line on its stdin.

    One ``docker exec`` serves every job the container runs, so a job costs
    neither an exec round trip nor an interpreter start. Records come back
    on the exec's stdout (Docker's multiplexed frames); a job ends at its
    nonce-tagged closing record, at the wall-clock limit (the container is
    then killed, as for a one-shot exec) or when the stream ends (the judge
    died: the caller inspects the container).
    """

    def __init__(self, client, container, user: str):
        api = client.api
        self._api, self._container = api, container
        argv = ["python3", "-I", "-S", RUNNER, "--serve", "/work"]
        self._exec_id = api.exec_create(container.id, argv, user=user, workdir="/work", stdin=True,
                                        stdout=True, stderr=True)["Id"]
        self._sock = api.exec_start(self._exec_id, socket=True)
        self._raw = getattr(self._sock, "_sock", self._sock)
        self._buf = b""
        self.ended = False

    def run(self, job: dict, timeout_s: float, cap: int) -> ExecResult:
        nonce = job["nonce"]
        closing = f"@@MF {nonce} ".encode()
        start = time.monotonic()
        deadline = start + timeout_s
        out = CappedOutput(cap)
        timed_out = False
        try:
            self._raw.sendall(json.dumps(job).encode() + b"\n")
            while True:
                line = self._readline(deadline)
                if line is None:
                    break
                out.add(line)
                if line.startswith(closing) and b'"done": true' in line:
                    break
        except TimeoutError:
            timed_out = True
            self.ended = True
            try:
                self._container.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        except OSError:
            self.ended = True
        code = None if not self.ended else self._api.exec_inspect(self._exec_id).get("ExitCode")
        return ExecResult(stdout=out.text(), exit_code=code, timed_out=timed_out, truncated=out.truncated,
                          duration_s=time.monotonic() - start)

    def _readline(self, deadline: float) -> bytes | None:
        """The next stdout line; None when the stream ended (the judge is gone)."""
        while b"\n" not in self._buf:
            frame = self._frame(deadline)
            if frame is None:
                self.ended = True
                rest, self._buf = self._buf, b""
                return rest or None
            self._buf += frame
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def _frame(self, deadline: float) -> bytes | None:
        while True:
            header = self._exact(8, deadline)
            if header is None:
                return None
            body = self._exact(int.from_bytes(header[4:8], "big"), deadline)
            if body is None:
                return None
            if header[0] == 1:  # stdout; stderr decides nothing
                return body

    def _exact(self, n: int, deadline: float) -> bytes | None:
        data = b""
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self._raw.settimeout(left)
            try:
                chunk = self._raw.recv(n - len(data))
            except TimeoutError:
                raise
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def judge(client, container, job: dict, config: SandboxConfig) -> ExecResult:
    argv = ["python3", "-I", "-S", RUNNER, "--in-container", "-"]
    return run_exec(client, container, argv, config.job_timeout_s, config.output_cap_bytes,
                    config.user, stdin=json.dumps(job).encode())


def container_state(container) -> dict:
    """The container's state after a job; {} when it no longer exists."""
    try:
        container.reload()
        return container.attrs.get("State", {})
    except Exception:  # noqa: BLE001 - gone, or the daemon is unreachable
        return {}


def remove(container) -> None:
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already removed
        pass


def reap_stale(client, label: str, live_pools: set[str]) -> int:
    """Remove containers that no pool will use again; ``live_pools``: this process's open pools."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": label}):
        if is_stale(c.labels, c.status, label, live_pools):
            remove(c)
            n += 1
    return n


def is_stale(labels: dict[str, str], status: str, label: str, live_pools: set[str]) -> bool:
    # A stopped container serves nobody: pools never restart one (a daemon restart stops them all).
    if status in ("exited", "dead"):
        return True
    host = labels.get(f"{label}.host")
    if host and host != socket.gethostname():
        return False  # a process on another machine; from here we cannot tell whether it runs
    owner = labels.get(f"{label}.owner", "")
    if not owner.isdigit() or int(owner) == 0:
        return True
    pid = int(owner)
    if pid == os.getpid():
        return labels.get(f"{label}.pool") not in live_pools  # a pool of ours that closed while the daemon was away
    if not pid_alive(pid):
        return True
    started = labels.get(f"{label}.owner_start")
    return bool(started) and started != _start_time(pid)  # the pid now belongs to another process


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux); '' where /proc has none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    # Field 22; the command name (field 2) may contain spaces and parentheses, so count from its end.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""
