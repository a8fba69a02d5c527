"""Start an engine (embedded or vLLM) in a child process and wait until it answers.

Both backends run as ``mindforge engine serve [--backend vllm]``: for vLLM
that process runs vLLM's server from ``.venv-vllm`` and keeps the same
port-file contract, so everything below is the same for both.

The child binds its socket itself (``--port 0`` picks a free port with no
race between choosing and binding) and writes the bound port to a file; the
parent reads it, then polls ``/health``. The child is started in its own
process group so stopping it also stops anything it spawned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal

import httpx

from mindforge.engine.registry import init_adapters, resolve_model
from mindforge.errors import MindForgeError
from mindforge.settings import Settings

__all__ = ["EngineProcess", "EngineStartError", "init_adapters"]


class EngineStartError(MindForgeError):
    pass


class EngineProcess:
    """``with EngineProcess(model, {"L0": path, ...}) as eng: httpx.get(eng.url + "/health")``.

    ``backend="vllm"`` serves with vLLM instead; ``startup_timeout_s`` then
    defaults to 900 s (vLLM takes minutes to start on two busy cores).
    """

    def __init__(self, model: str | Path, adapters: Mapping[str, Path] | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, settings: Settings, log_path: Path | None = None,
                 startup_timeout_s: float | None = None, extra_args: tuple[str, ...] = (),
                 backend: Literal["embedded", "vllm"] = "embedded"):
        if backend not in ("embedded", "vllm"):
            raise ValueError(f"backend: {backend!r}, expected 'embedded' or 'vllm'")
        self.backend = backend
        self.model = model
        self.adapters = dict(adapters or {})
        self.host = host
        self.port = port
        self.settings = settings
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout_s = startup_timeout_s or (900.0 if backend == "vllm" else 300.0)
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.url: str = ""
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._log_fh = None

    def command(self, port_file: Path) -> list[str]:
        cmd = [sys.executable, "-m", "mindforge.engine", "serve", "--model", str(self.model),
               "--host", self.host, "--port", str(self.port), "--port-file", str(port_file),
               "--exit-with-parent", "--dtype", self.settings.engine_dtype]
        if self.backend == "vllm":
            cmd += ["--backend", "vllm"]
        if str(self.model) == self.settings.model:
            cmd += ["--served-model-name", self.settings.model]
        for name, path in self.adapters.items():
            cmd += ["--adapter", f"{name}={path}"]
        return cmd + list(self.extra_args)

    def start(self) -> EngineProcess:
        if self.backend == "vllm":
            from mindforge.engine.vllm_backend import vllm_python

            vllm_python(self.settings)  # a missing .venv-vllm is named here, with the command that installs it
        # Pull or check the model here, where an error is readable, not in the child's log.
        resolve_model(self.model, self.settings)
        self._tmp = tempfile.TemporaryDirectory(prefix="mf-engine-")
        port_file = Path(self._tmp.name) / "port"
        log_path = self.log_path or Path(self._tmp.name) / "engine.log"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(log_path, "ab")  # noqa: SIM115 - held open for the child's lifetime
        env = {**os.environ, "MINDFORGE_CACHE_DIR": str(self.settings.cache_dir)}
        self.proc = subprocess.Popen(self.command(port_file), stdout=self._log_fh, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        try:
            self._wait_ready(port_file)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, port_file: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineStartError(f"the engine exited with code {self.proc.returncode} while starting; "
                                       f"last log lines:\n{self.log_tail()}")
            if not self.url and port_file.is_file():
                host = f"[{self.host}]" if ":" in self.host else self.host
                self.url = f"http://{host}:{int(port_file.read_text())}"
            if self.url and _healthy(self.url):
                return
            time.sleep(0.2)
        raise EngineStartError(f"the engine did not answer /health within {self.startup_timeout_s:.0f} s; "
                               f"last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout_s)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        if self._tmp is not None:
            if self.log_path is not None and self.log_path.parent == Path(self._tmp.name):
                self.log_path = None  # it goes with the temporary folder
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EngineProcess:  # noqa: PYI034 - start() returns this very object
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
