"""The engine's HTTP server: FastAPI routes over one ``Scheduler``.

Handlers validate, tokenize, hand the request to the scheduler thread and
await its future; they never touch the model. Every failure a caller can
cause is answered as an OpenAI-style error body naming the field, and the
server keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from mindforge.engine.model import AdapterError, EngineModel
from mindforge.engine.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    chat_response,
    completion_response,
)
from mindforge.engine.scheduler import AdapterNameError, Scheduler
from mindforge.engine.sequence import GenerationRequest, UnknownModel
from mindforge.settings import ENGINE_MAX_BATCH, Settings

log = logging.getLogger(__name__)

_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


@dataclass
class Engine:
    model: EngineModel
    scheduler: Scheduler
    base_name: str


def field_path(loc: tuple[Any, ...]) -> str:
    """``('body', 'prompt', 'list[int]', 3)`` -> ``prompt/3``: the JSON path a caller can find."""
    parts = [str(p) for p in loc[1:] if not (isinstance(p, str) and (p.lower() in _UNION_TAGS or "[" in p))]
    return "/".join(parts) or "body"


def describe_validation(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        return ApiError(400, f"body: not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})", param="body")
    path = field_path(tuple(first["loc"]))
    same = [e for e in errors if field_path(tuple(e["loc"])).split("/")[0] == path.split("/")[0]]
    msgs = "; or ".join(dict.fromkeys(f"{field_path(tuple(e['loc']))}: {e['msg']}" for e in same))
    return ApiError(400, msgs, param=path)


def create_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="mindforge engine", docs_url=None, redoc_url=None)
    sched, model = engine.scheduler, engine.model

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = describe_validation(exc)
        return JSONResponse(err.body(), status_code=err.status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "dtype": str(model.dtype).removeprefix("torch.")}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(sched.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [_model_card(engine.base_name, None)]
        data += [_model_card(name, engine.base_name, info.path) for name, info in sched.adapters.items()]
        return {"object": "list", "data": data}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> dict[str, Any]:
        _check_model(engine, body.model)
        if isinstance(body.prompt, str):
            ids = model.tokenizer.encode(body.prompt)
        else:
            ids = list(body.prompt)
        params = body.sampling(_max_tokens(engine, len(ids), body.max_tokens, "max_tokens"), body.logprobs)
        _check_ids(engine, ids, "prompt")
        _check_ids(engine, list(params.stop_token_ids), "stop_token_ids")
        result = await _generate(sched, GenerationRequest(body.model, ids, params, body.skip_special_tokens))
        return completion_response(body.model, result, body, model.tokenizer)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest) -> dict[str, Any]:
        _check_model(engine, body.model)
        ids = _render_chat(model, body)
        limit = body.max_completion_tokens or body.max_tokens
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        params = body.sampling(_max_tokens(engine, len(ids), limit, "max_tokens"), logprobs)
        result = await _generate(sched, GenerationRequest(body.model, ids, params, body.skip_special_tokens))
        return chat_response(body.model, result, body, model.tokenizer)

    @app.post("/v1/load_lora_adapter")
    async def load_adapter(body: LoadAdapterRequest) -> dict[str, Any]:
        path = Path(body.lora_path).expanduser()
        if not path.is_dir():
            raise ApiError(400, f"lora_path: {path} is not a directory", param="lora_path")
        try:
            info = await asyncio.wrap_future(sched.load_adapter(body.lora_name, path))
        except AdapterNameError as exc:
            raise ApiError(400, str(exc), param="lora_name") from None
        except AdapterError as exc:
            raise ApiError(400, f"lora_path: {exc}", param="lora_path") from None
        return {"status": "ok", "lora_name": info.name, "lora_path": info.path}

    @app.post("/v1/unload_lora_adapter")
    async def unload_adapter(body: UnloadAdapterRequest) -> dict[str, Any]:
        try:
            info = await asyncio.wrap_future(sched.unload_adapter(body.lora_name))
        except UnknownModel as exc:
            raise ApiError(404, f"lora_name: {exc}", param="lora_name", kind="not_found_error",
                           code="model_not_found") from None
        return {"status": "ok", "lora_name": info.name}

    return app


def _model_card(name: str, parent: str | None, path: str | None = None) -> dict[str, Any]:
    card = {"id": name, "object": "model", "owned_by": "mindforge", "root": path or name, "parent": parent}
    return card


def _check_model(engine: Engine, name: str) -> None:
    if name != engine.base_name and name not in engine.scheduler.adapters:
        known = ", ".join(engine.scheduler.known_models())
        raise ApiError(404, f"model: {name!r} is not served here (known: {known})", param="model",
                       kind="not_found_error", code="model_not_found")


def _check_ids(engine: Engine, ids: list[int], field: str) -> None:
    vocab = engine.model.geometry.vocab_size
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            raise ApiError(400, f"{field}/{i}: token id {t} is outside the vocabulary (0..{vocab - 1})",
                           param=f"{field}/{i}")


def _max_tokens(engine: Engine, prompt_len: int, requested: int | None, field: str) -> int:
    limit = engine.model.geometry.max_positions
    room = limit - prompt_len
    if room < 1:
        raise ApiError(400, f"prompt: {prompt_len} tokens leave no room in the model's context of {limit}",
                       param="prompt")
    if requested is None:
        return room
    if requested > room:
        raise ApiError(400, f"{field}: {requested} exceeds the {room} tokens left after a {prompt_len}-token "
                       f"prompt (context {limit})", param=field)
    return requested


def _render_chat(model: EngineModel, body: ChatRequest) -> list[int]:
    messages = [m.for_template() for m in body.messages]
    try:
        out = model.tokenizer.apply_chat_template(messages, tools=body.tools, tokenize=True,
                                                  add_generation_prompt=body.add_generation_prompt)
    except Exception as exc:  # noqa: BLE001 - a template error is the caller's messages
        raise ApiError(400, f"messages: the chat template rejected them: {exc}", param="messages") from None
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return [int(t) for t in out]


async def _generate(sched: Scheduler, request: GenerationRequest):
    try:
        return await asyncio.wrap_future(sched.submit(request))
    except UnknownModel as exc:  # unloaded between the check and admission
        raise ApiError(404, f"model: {exc}", param="model", kind="not_found_error", code="model_not_found") from None


def build_engine(model: str | Path, adapters: Mapping[str, Path], *, settings: Settings,
                 device: str | None = None, served_name: str | None = None, max_batch: int = ENGINE_MAX_BATCH,
                 prefix_cache_tokens: int = 32768, dtype: str = "float32", start: bool = True) -> Engine:
    """Resolve the model, load it and the named adapters; ``start``: run the scheduler in a thread of its own
    (``serve`` runs it in the calling thread instead)."""
    from mindforge.engine.registry import resolve_model

    folder = resolve_model(model, settings)
    name = served_name or (settings.model if str(model) == settings.model else Path(folder).name)
    em = EngineModel(folder, device=device, dtype=getattr(torch, dtype))
    sched = Scheduler(em, name, max_batch=max_batch, prefix_cache_tokens=prefix_cache_tokens)
    for adapter_name, path in adapters.items():
        sched.preload_adapter(adapter_name, Path(path))
    if start:
        sched.start()
    return Engine(em, sched, name)


def serve(engine: Engine, host: str, port: int, port_file: Path | None = None) -> None:
    """Bind first (port 0 picks a free one), publish the bound port, then serve until interrupted.

    The scheduler loop runs here, in the calling (main) thread, and the HTTP server in a thread beside it:
    the decode step is about 30% faster in the main thread (``Scheduler.run``). SIGTERM and SIGINT stop
    both; an HTTP server that dies stops the loop.
    """
    import signal
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_name(port_file.name + ".tmp")
        tmp.write_text(str(bound))
        tmp.replace(port_file)
    log.info("engine serving %s on http://%s:%d", engine.base_name, host, bound)
    config = uvicorn.Config(create_app(engine), log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    http = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="engine-http", daemon=True)

    def shut_down(signum: int, frame: object) -> None:
        server.should_exit = True
        engine.scheduler.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shut_down)
    http.start()
    try:
        engine.scheduler.run(alive=http.is_alive)
    finally:
        server.should_exit = True
        engine.scheduler.stop()
        http.join(10)
