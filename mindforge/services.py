"""Local background services: start once, find again, stop cleanly.

``mindforge up`` starts the Prefect server, the embedded engine and the proxy
as detached processes; ``mindforge down`` stops them. Each service has a PID
file and a log in the state folder, and a health URL. A service whose health
URL already answers is reused, whoever started it, so ``up`` is idempotent
and stages can call ``ensure`` without caring whether a user ran ``up``.

Processes are started in their own session (``start_new_session``) so that
they outlive the command that started them and can be stopped as a group
(uvicorn and Prefect spawn children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from mindforge.errors import MindForgeError
from mindforge.procs import pid_alive


class ServiceError(MindForgeError):
    pass


class ServiceSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    argv: tuple[str, ...]
    health_url: str
    env: dict[str, str] = {}
    start_timeout_s: float = 180.0


class ServiceStatus(BaseModel):
    name: str
    healthy: bool
    pid: int | None
    url: str
    log: Path


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process_group(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the process group led by ``pid``, wait up to ``timeout``, then SIGKILL it."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)  # reaps it when it is our child
            except ChildProcessError:
                done = 0 if pid_alive(pid) else pid
            if done or not pid_alive(pid):
                return
            time.sleep(0.2)


class ServiceManager:
    """Starts, finds and stops services; all state lives under ``state_dir``."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)

    def pidfile(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def logfile(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def pid(self, name: str) -> int | None:
        try:
            pid = int(self.pidfile(name).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def status(self, spec: ServiceSpec) -> ServiceStatus:
        return ServiceStatus(
            name=spec.name,
            healthy=healthy(spec.health_url),
            pid=self.pid(spec.name),
            url=spec.health_url,
            log=self.logfile(spec.name),
        )

    def ensure(self, spec: ServiceSpec) -> tuple[ServiceStatus, bool]:
        """Reuse a healthy service or start one; returns (status, started_now)."""
        if healthy(spec.health_url):
            return self.status(spec), False
        if (stale := self.pid(spec.name)) is not None:
            # Alive but not healthy: a previous start still coming up, or hung.
            if self._wait_healthy(spec, stale, timeout=spec.start_timeout_s):
                return self.status(spec), False
            self.stop(spec.name)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = self.logfile(spec.name).open("ab")
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {' '.join(spec.argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(spec.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **spec.env},
            start_new_session=True,
        )
        log.close()
        self.pidfile(spec.name).write_text(str(proc.pid))
        if not self._wait_healthy(spec, proc.pid, timeout=spec.start_timeout_s):
            self.stop(spec.name)
            tail = self.logfile(spec.name).read_text(errors="replace")[-2000:]
            raise ServiceError(
                f"{spec.name} did not become healthy at {spec.health_url} within "
                f"{spec.start_timeout_s:.0f}s; log {self.logfile(spec.name)}:\n{tail}"
            )
        return self.status(spec), True

    def _wait_healthy(self, spec: ServiceSpec, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if healthy(spec.health_url):
                return True
            if not pid_alive(pid):
                return False
            time.sleep(0.5)
        return False

    def stop(self, name: str, timeout: float = 20.0) -> bool:
        """SIGTERM the service's process group, then SIGKILL; True if one was running."""
        pid = self.pid(name)
        self.pidfile(name).unlink(missing_ok=True)
        if pid is None:
            return False
        stop_process_group(pid, timeout)
        return True

    def up(self, specs: Sequence[ServiceSpec]) -> list[tuple[ServiceStatus, bool]]:
        return [self.ensure(s) for s in specs]

    def down(self, names: Sequence[str]) -> list[str]:
        return [n for n in reversed(list(names)) if self.stop(n)]
