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

from mindforge.sandbox.config import SandboxConfig

RUNNER = "/opt/mindforge/runner.py"


def docker_client(timeout: int = 120):
    import docker

    return docker.from_env(timeout=timeout)


def start_container(client, image: str, config: SandboxConfig):
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
        labels={config.label: "1", f"{config.label}.owner": str(os.getpid())},
        shm_size="16m",
    )


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
    chunks: list[bytes] = []
    size, truncated = 0, False
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(stdin)
        raw.shutdown(socket.SHUT_WR)
        for stream, chunk in frames_iter(sock, tty=False):
            if stream != 1:
                continue  # stderr: the runner writes nothing there that decides anything
            if size < cap:
                chunks.append(chunk[: cap - size])
                truncated |= len(chunk) > cap - size
            else:
                truncated = True
            size += len(chunk)
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
        stdout=b"".join(chunks).decode("utf-8", "replace"),
        exit_code=code,
        timed_out=timed_out.is_set(),
        truncated=truncated,
        duration_s=time.monotonic() - start,
    )


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


def reap_stale(client, label: str) -> int:
    """Remove containers left by MindForge processes that no longer run."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": label}):
        owner = c.labels.get(f"{label}.owner", "")
        alive = owner.isdigit() and _alive(int(owner)) and int(owner) != 0
        if not alive:
            remove(c)
            n += 1
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
