"""A real Prefect server (and worker) for end-to-end tests, on a free port.

Each use gets its own PREFECT_HOME (its own SQLite database), so tests never
touch a user's Prefect profile or server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx

VENV_BIN = Path(__file__).resolve().parents[1] / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_bin() -> str:
    local = VENV_BIN / "prefect"
    return str(local) if local.exists() else (shutil.which("prefect") or "prefect")


class PrefectStack:
    def __init__(self, home: Path):
        self.home = Path(home)
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_UI_API_URL": self.api_url,
        }

    def start_server(self, timeout: float = 120) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        log = (self.home / "server.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [prefect_bin(), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"prefect server did not start: {(self.home / 'server.log').read_text()[-2000:]}")

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 300, extra_env: dict | None = None):
        return subprocess.run(
            [prefect_bin(), *args], env={**self.env, **(extra_env or {})}, cwd=cwd,
            capture_output=True, text=True, timeout=timeout,
        )

    def start_worker(self, pool: str, cwd: Path, extra_env: dict | None = None, queue: str | None = None) -> None:
        log = (self.home / "worker.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [prefect_bin(), "worker", "start", "--pool", pool, *(["--work-queue", queue] if queue else [])],
                env={**self.env, **(extra_env or {})}, cwd=cwd, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        )

    def stop(self) -> None:
        from mindforge.services import stop_process_group

        for p in reversed(self.procs):
            stop_process_group(p.pid, timeout=20)
        self.procs.clear()
