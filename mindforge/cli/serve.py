"""`mindforge serve`: the OpenAI-compatible MoL proxy in front of a multi-LoRA engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mindforge.cli._common import user_errors
from mindforge.errors import InputError

if TYPE_CHECKING:
    from mindforge.harness.harness import Harness


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds to this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key_from(key_file: Path | None, env_value: str | None) -> str | None:
    """The key from ``--api-key-file`` (first line) or MINDFORGE_API_KEY; None when neither is set."""
    if key_file is not None:
        try:
            key = key_file.expanduser().read_text().strip().splitlines()
        except OSError as exc:
            raise InputError(str(key_file), "", f"cannot read the API key file: {exc.strerror}") from None
        if not key or not key[0].strip():
            raise InputError(str(key_file), "1", "the API key file is empty")
        return key[0].strip()
    return env_value or None


def check_auth(host: str, key: str | None, allow_unauthenticated: bool) -> None:
    if key is not None:
        return
    if not allow_unauthenticated:
        raise InputError("mindforge serve", "--api-key-file", "an API key is required: set MINDFORGE_API_KEY or "
                         "pass --api-key-file (or, on a loopback address only, --allow-unauthenticated)")
    if not is_loopback(host):
        raise InputError("mindforge serve", "--allow-unauthenticated",
                         f"serving without a key is allowed only on a loopback address, not on {host!r}")


@user_errors()
def serve(
    hcp: Annotated[Path, typer.Option("--hcp", help="HCP file describing the harness.")],
    upstream: Annotated[str | None, typer.Option(
        "--upstream", help="Engine URL (vLLM, SGLang or `mindforge engine serve`); default: the settings' engine URL.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Bind address; default: settings.host.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port; default: settings.proxy_port (8401).")] = None,
    allow_unauthenticated: Annotated[bool, typer.Option(
        "--allow-unauthenticated", help="Serve without an API key (loopback addresses only).")] = False,
    api_key_file: Annotated[Path | None, typer.Option(
        "--api-key-file", help="File whose first line is the API key clients must send.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Model name or folder for the tokenizer; default: the HCP's provider.model.")] = None,
    public_model: Annotated[str | None, typer.Option(
        "--public-model", help="Model name clients see; default: the HCP's provider.model.")] = None,
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /v1/models and /health through the MoL harness."""
    import logging

    import uvicorn

    from mindforge.engine.registry import resolve_model
    from mindforge.harness import open_harness
    from mindforge.harness.client import EngineClient
    from mindforge.harness.proxy import create_app
    from mindforge.hcp import load_hcp
    from mindforge.settings import load_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = load_settings()
    bind = host or settings.host
    key = api_key_from(api_key_file, settings.api_key)
    check_auth(bind, key, allow_unauthenticated)
    doc = load_hcp(hcp)
    url = (upstream or settings.engine_url or settings.local_engine_url).rstrip("/")
    engine_key = os.environ.get(doc.provider.api_key_env) if doc.provider.api_key_env else None
    model_path = resolve_model(model or doc.provider.model, settings)
    harness = open_harness(doc, url, model_path, client=EngineClient(url, api_key=engine_key))
    app = create_app(harness, public_model=public_model, api_key=key)
    _say_upstream_state(harness)
    print(f"mindforge proxy on http://{bind}:{settings.proxy_port if port is None else port} -> {url}"
          f" ({'key required' if key else 'no key, loopback only'})", flush=True)
    uvicorn.run(app, host=bind, port=settings.proxy_port if port is None else port, log_level="info")


def _say_upstream_state(harness: Harness) -> None:
    """At start, say whether the upstream can serve the HCP; serve either way.

    The engine may be started after the proxy, or be handed the adapters later
    (Update's /v1/load_lora_adapter), so this warns instead of refusing; /health
    answers 503 with the same words until it can.
    """
    import asyncio
    import sys

    from mindforge.harness.proxy import upstream_check

    problem, _ = asyncio.run(upstream_check(harness))
    if problem is None:
        print("upstream: serves every adapter the HCP routes to", flush=True)
    else:
        print(f"warning: upstream cannot serve this HCP yet: {problem}; /health answers 503 until it can",
              file=sys.stderr, flush=True)
