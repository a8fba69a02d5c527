"""`mindforge engine serve`: the embedded multi-LoRA engine or vLLM (also `python -m mindforge.engine serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import choices, user_errors
from mindforge.errors import InputError
from mindforge.settings import ENGINE_BACKENDS, ENGINE_DTYPES, ENGINE_MAX_BATCH

app = typer.Typer(help="The embedded OpenAI-compatible multi-LoRA engine.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Keeps `serve` a named subcommand (typer collapses a lone command otherwise)."""


def parse_adapters(specs: list[str]) -> dict[str, Path]:
    adapters: dict[str, Path] = {}
    for i, spec in enumerate(specs):
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError("--adapter", str(i + 1), f"{spec!r}: expected NAME=PATH")
        if name in adapters:
            raise InputError("--adapter", str(i + 1), f"{name!r} is given twice")
        adapters[name] = Path(path).expanduser()
    return adapters


def watch_parent(interval_s: float = 1.0) -> None:
    """SIGTERM ourselves once our parent is gone (re-parented), for a graceful shutdown.

    An engine started by a stage or flow runs in its own process group, so a
    SIGKILL of its starter would otherwise leave it serving forever.
    """
    import os
    import signal
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


@app.command()
@user_errors()
def serve(
    model: Annotated[str | None, typer.Option(
        "--model", help="Registry name or local model folder.", show_default="settings.model")] = None,
    adapter: Annotated[list[str] | None, typer.Option(
        "--adapter", help="NAME=PATH of a peft LoRA folder; repeatable.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Bind address.", show_default="settings.host")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="Port; 0 picks a free one.", show_default="settings.engine_port")] = None,
    port_file: Annotated[Path | None, typer.Option(
        "--port-file", help="Write the bound port here once listening.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help="torch device.", show_default="cuda when available, else cpu")] = None,
    served_model_name: Annotated[str | None, typer.Option(
        "--served-model-name", help="Name of the base model in the API.")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Most sequences decoded together.")] = ENGINE_MAX_BATCH,
    prefix_cache_tokens: Annotated[int, typer.Option(
        "--prefix-cache-tokens", min=0, help="Tokens the prefix KV cache may hold (all adapters).")] = 32768,
    exit_with_parent: Annotated[bool, typer.Option(
        "--exit-with-parent", help="Shut down when the process that started this one dies.")] = False,
    backend: Annotated[str, typer.Option(
        "--backend", help="embedded (this package's engine) or vllm (vLLM from .venv-vllm: make setup VLLM=1).",
        **choices(*ENGINE_BACKENDS))] = "embedded",
    max_loras: Annotated[int, typer.Option(
        "--max-loras", min=1, help="vllm only: adapters batched together.")] = 4,
    max_lora_rank: Annotated[int, typer.Option(
        "--max-lora-rank", min=1, help="vllm only: the largest adapter rank served.")] = 8,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", help="Weights and activations: float32 (the trainer's; parity 1e-3) or bfloat16 (faster, "
        "logprobs within ~0.1).", show_default="settings.engine_dtype", **choices(*ENGINE_DTYPES))] = None,
) -> None:
    """Serve a base model and named LoRA adapters over the vLLM-compatible HTTP API."""
    import logging

    if backend == "vllm":
        _serve_vllm(model, adapter or [], host, port, port_file, served_model_name, exit_with_parent,
                    max_loras, max_lora_rank, dtype)
        return

    from mindforge.engine.server import build_engine
    from mindforge.engine.server import serve as run_server
    from mindforge.settings import load_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = load_settings()
    if exit_with_parent:
        watch_parent()
    adapters = parse_adapters(adapter or [])
    engine = build_engine(model or settings.model, adapters, settings=settings, device=device,
                          served_name=served_model_name, max_batch=max_batch, prefix_cache_tokens=prefix_cache_tokens,
                          dtype=dtype or settings.engine_dtype, start=False)
    run_server(engine, host or settings.host, settings.engine_port if port is None else port, port_file)


def _serve_vllm(model: str | None, adapter_specs: list[str], host: str | None, port: int | None,
                port_file: Path | None, served_model_name: str | None, exit_with_parent: bool,
                max_loras: int, max_lora_rank: int, dtype: str | None = None) -> None:
    from mindforge.engine import vllm_backend as vb
    from mindforge.engine.registry import resolve_model
    from mindforge.settings import load_settings

    settings = load_settings()
    python = vb.vllm_python(settings)  # first: a missing vLLM is the error to read, not a model download
    name = model or settings.model
    folder = resolve_model(name, settings)
    # A registry name is served under that name (as the embedded engine does); a folder under its own name.
    served = served_model_name or (folder.name if Path(name).expanduser().exists() else name)
    bind = host or settings.host
    chosen = settings.engine_port if port is None else port
    chosen = chosen or vb.free_port(bind)
    adapters = parse_adapters(adapter_specs)
    cmd = vb.vllm_command(python, folder, served, adapters, host=bind, port=chosen, max_loras=max_loras,
                          max_lora_rank=max_lora_rank, dtype=dtype or settings.engine_dtype)
    if exit_with_parent:
        watch_parent()
    url_host = f"[{bind}]" if ":" in bind else bind
    raise typer.Exit(vb.serve_vllm(cmd, vb.vllm_env(), f"http://{url_host}:{chosen}", chosen, port_file))
