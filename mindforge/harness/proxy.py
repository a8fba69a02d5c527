"""The OpenAI-compatible proxy in front of a multi-LoRA engine (``mindforge serve``).

Endpoints: ``/v1/chat/completions`` (stateless: the client resends history;
``stream`` answers as server-sent events; client tools are honoured: calls go
back to the client, and its results continue on the adapter that called,
with no new route), ``/v1/responses`` (state kept here, continued with
``previous_response_id``), ``/v1/models`` (the public model name only) and
``/health``. Every turn goes through ``Harness.turn``: the same code that
training rollouts run.

Invariants: adapter names never appear in an answer (bodies are built by
``wire`` from the turn's answer, calls and token counts only); every error is
an OpenAI-style body naming the field, and no request can stop the server; an
engine that is down is a 502 with the reason. An engine that lacks adapters
the HCP routes to makes ``/health`` a 503 naming them (the operator's view),
and a turn that fails on it a 502 that says so by count. A key is required on every
``/v1`` route unless the app was built with ``api_key=None``, which the CLI
allows only on a loopback address with ``--allow-unauthenticated``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mindforge.errors import InputError
from mindforge.harness import conversations as conv
from mindforge.harness import wire
from mindforge.harness.client import EngineError, EngineUnavailable
from mindforge.harness.harness import Harness, TurnRecord
from mindforge.harness.session import Session

log = logging.getLogger("mindforge.proxy")


class ProxyState:
    def __init__(self, harness: Harness, public_model: str, api_key: str | None, max_responses: int = 20000):
        self.harness, self.public_model, self.api_key = harness, public_model, api_key
        self.chats = conv.ConversationStore()
        self.responses: OrderedDict[str, Session] = OrderedDict()
        self.max_responses = max_responses
        self.turns = 0

    def check_model(self, model: str) -> None:
        if model != self.public_model:
            raise wire.WireError(404, f"model: {model!r} does not exist; this server serves {self.public_model!r}",
                                 "model", "model_not_found")

    def scrub(self, err: wire.WireError) -> wire.WireError:
        """The error with every adapter name replaced by the public model name.

        Only server-side errors (the engine's words, internal failures) are
        scrubbed: a 4xx quotes what the client itself sent, which it knows.
        """
        if err.status < 500:
            return err
        hcp = self.harness.hcp
        names = {n for r in hcp.router.routes for n in (hcp.served_adapter(r), hcp.adapter(r))}
        message = err.message
        for name in sorted(names, key=len, reverse=True):
            message = message.replace(name, self.public_model)
        if message != err.message:
            err = wire.WireError(err.status, message, err.param, err.code, err.kind)
        return err

    def keep_response(self, rid: str, session: Session) -> None:
        self.responses[rid] = conv.clone(session)
        while len(self.responses) > self.max_responses:
            self.responses.popitem(last=False)


def create_app(harness: Harness, *, public_model: str | None = None, api_key: str | None = None) -> FastAPI:
    state = ProxyState(harness, public_model or harness.hcp.provider.model, api_key)
    app = FastAPI(title="MindForge proxy", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.proxy = state

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if state.api_key is not None and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {state.api_key}".encode()):
                return _error(wire.WireError(401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                             code="invalid_api_key", kind="authentication_error"))
        try:
            return await call_next(request)
        except EngineError as exc:
            # Scrubbed, the engine's "model 'mf-L1@v2' is not served" reads as nonsense; say what is wrong.
            missing = await missing_adapters(state.harness)
            if missing:
                return _error(wire.WireError(502, _missing_words(state.harness, missing, for_client=True),
                                             code="engine_error", kind="api_error"))
            return _error(state.scrub(_as_wire(exc)))
        except Exception as exc:  # noqa: BLE001 - one bad request must never stop the server
            return _error(state.scrub(_as_wire(exc)))

    @app.get("/health")
    async def health() -> JSONResponse:
        reason, missing = await upstream_check(state.harness)
        body = {"status": "ok" if reason is None else "degraded", "model": state.public_model,
                "turns": state.turns, "upstream": {"ok": reason is None, "error": reason,
                                                   "missing_adapters": missing}}
        # 503 when the engine is down or cannot serve the HCP, so a load balancer stops sending
        # turns that can only fail
        return JSONResponse(body, status_code=200 if reason is None else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": state.public_model, "object": "model", "created": 0,
                                            "owned_by": "mindforge"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        req = wire.parse(wire.ChatRequest, await _json(request))
        state.check_model(req.model)
        history, text, results = conv.split_request(req.messages)
        session = state.chats.get(conv.history_key(history)) or conv.rebuild(harness, history)
        session.system = conv.system_text(history) or session.system
        record = await _turn(state, session, text, results, tools=req.tools, seed=req.seed, max_tokens=req.limit())
        reply = wire.Message(role="assistant", content=record.answer,
                             tool_calls=[c.openai() for c in record.pending_tool_calls] or None)
        state.chats.put(conv.history_key([*req.messages, reply]), session)
        if req.stream:
            chunks = wire.chat_chunks(record, state.public_model)
            if _wants_usage(req):  # OpenAI's stream_options.include_usage: a last chunk with no choices
                chunks.append({**chunks[-1], "choices": [], "usage": record.usage})
            return StreamingResponse(_sse(chunks), media_type="text/event-stream")
        return wire.chat_body(record, state.public_model)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        req = wire.parse(wire.ResponsesRequest, await _json(request))
        state.check_model(req.model)
        if req.previous_response_id is not None:
            prev = state.responses.get(req.previous_response_id)
            if prev is None:
                raise wire.WireError(404, f"previous_response_id: no response {req.previous_response_id!r} here",
                                     "previous_response_id", "response_not_found")
            session = conv.clone(prev)
        else:
            session = harness.new_session()
        if req.instructions is not None:
            session.system = req.instructions
        text, results = wire.responses_input(req)
        record = await _turn(state, session, text, results, tools=req.chat_tools(), seed=req.seed,
                             max_tokens=req.max_output_tokens)
        rid = f"resp_{uuid.uuid4().hex}"
        state.keep_response(rid, session)
        return wire.responses_body(record, state.public_model, rid, req.previous_response_id)

    for code in (404, 405):
        app.add_exception_handler(code, _http_error)
    return app


async def _turn(state: ProxyState, session: Session, text: str | None, results: list, *, tools: Any,
                seed: int | None, max_tokens: int | None) -> TurnRecord:
    t0 = time.perf_counter()
    record = await state.harness.turn(session, text, tools=tools, tool_results=results or None, seed=seed,
                                      max_tokens=max_tokens)
    state.turns += 1
    engine_s = sum(h.duration_s for h in record.hops)
    log.info("turn route=%s hops=%d engine=%.3fs total=%.3fs", record.route, len(record.hops), engine_s,
             time.perf_counter() - t0)
    return record


def _wants_usage(req: wire.ChatRequest) -> bool:
    options = (req.model_extra or {}).get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise wire.WireError(400, "stream_options: expected an object such as {\"include_usage\": true}",
                             "stream_options")
    return bool((options or {}).get("include_usage"))


async def _probe(harness: Harness, path: str, timeout_s: float) -> httpx.Response:
    """One GET of the engine with the harness's key and transport, on a client of its own (a probe's
    timeout must not be the long one generation needs)."""
    client = harness.client
    headers = {"Authorization": f"Bearer {client.api_key}"} if client.api_key else {}
    async with httpx.AsyncClient(base_url=client.base_url, timeout=timeout_s, transport=client.transport,
                                 headers=headers) as http:
        return await http.get(path)


async def _upstream_problem(harness: Harness, timeout_s: float = 5.0) -> str | None:
    """None when the engine answers ``GET /health``, else why not (one try: a probe must be quick)."""
    client = harness.client
    try:
        resp = await _probe(harness, "/health", timeout_s)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the probe reports it instead of failing
        return f"engine at {client.base_url}: {type(exc).__name__}: {exc or 'no answer'}"
    if resp.status_code != 200:
        return f"engine at {client.base_url} answered /health with HTTP {resp.status_code}"
    return None


async def upstream_check(harness: Harness) -> tuple[str | None, list[str]]:
    """(why the upstream cannot serve this HCP, or None; the adapter names it lacks)."""
    reason = await _upstream_problem(harness)
    missing = await missing_adapters(harness) if reason is None else None
    if missing:
        reason = _missing_words(harness, missing)
    return reason, missing or []


async def missing_adapters(harness: Harness, timeout_s: float = 5.0) -> list[str] | None:
    """The served adapters the HCP routes to that the engine's ``/v1/models`` does not list.

    ``None`` when the engine cannot be asked (down, or no ``/v1/models``): that is
    ``_upstream_problem``'s to report, not a verdict on the adapters.
    """
    try:
        resp = await _probe(harness, "/v1/models", timeout_s)
        served = {m.get("id") for m in resp.json().get("data", [])} if resp.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a probe reports, it never fails the request that asked
        served = None
    if served is None:
        return None
    wanted = needed_adapters(harness)
    return sorted(name for name in set(wanted.values()) if name not in served)


def needed_adapters(harness: Harness) -> dict[str, str]:
    """Route -> the engine-side adapter name every hop of that route asks for."""
    hcp = harness.hcp
    return {route: hcp.served_adapter(route) for route in hcp.router.routes}


def _missing_words(harness: Harness, missing: list[str], *, for_client: bool = False) -> str:
    wanted = needed_adapters(harness)
    url = harness.client.base_url
    if for_client:  # adapter names never reach a client: a count, and where the names are
        return (f"the engine behind this server does not serve {len(missing)} of the "
                f"{len(set(wanted.values()))} adapters this model routes to; its operator sees which in /health")
    routes = sorted(r for r, name in wanted.items() if name in missing)
    return (f"engine at {url} does not serve {len(missing)} adapter(s) the HCP routes to: "
            f"{', '.join(missing)} (route(s) {', '.join(routes)}); load them into the engine "
            f"(/v1/load_lora_adapter or --adapter NAME=PATH) or point --upstream at one that serves them")


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except ValueError as exc:
        raise wire.WireError(400, f"the request body is not JSON: {exc}") from None


async def _sse(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _as_wire(exc: Exception) -> wire.WireError:
    if isinstance(exc, wire.WireError):
        return exc
    if isinstance(exc, EngineUnavailable):
        return wire.WireError(502, f"the engine is unavailable: {exc}", code="engine_unavailable", kind="api_error")
    if isinstance(exc, EngineError):
        return wire.WireError(502, f"the engine refused the request: {exc.message}", code="engine_error",
                              kind="api_error")
    if isinstance(exc, InputError):
        return wire.WireError(400, str(exc), param=exc.where or None)
    log.exception("unexpected error")
    return wire.WireError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")


def _error(err: wire.WireError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


async def _http_error(request: Request, exc: Any) -> JSONResponse:
    return _error(wire.WireError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))
