"""Async client for the engine's ``/v1/completions`` with token-id prompts.

The harness sends token ids and keeps the token ids the engine returns, so
this client asks for ``return_token_ids`` and per-token logprobs on every
call. Invariants:

- retries happen only on connection errors and 5xx answers that say the
  engine is not ready (a request the engine refused with 4xx is the caller's
  bug and is raised at once as ``EngineError`` with the engine's message);
- an ``httpx.AsyncClient`` belongs to one event loop, and stages call
  ``asyncio.run`` once per batch, so one pooled client is kept per running
  loop rather than one per instance;
- ``transport`` is the seam a unit test uses to stand in for an engine.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from mindforge.errors import MindForgeError

DEFAULT_TIMEOUT_S = 300.0


class EngineUnavailable(MindForgeError):
    """The engine could not be reached (or kept failing) after the retries."""


class EngineError(MindForgeError):
    """The engine answered a request with an error."""

    def __init__(self, status: int, message: str):
        super().__init__(f"engine answered {status}: {message}")
        self.status, self.message = status, message


@dataclass(frozen=True)
class Completion:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str | None


class EngineClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retries: int = 2, transport: httpx.AsyncBaseTransport | None = None,
                 backoff_s: float = 0.25):
        self.base_url = base_url.rstrip("/")
        self.api_key, self.timeout_s, self.retries = api_key, timeout_s, retries
        self.transport, self.backoff_s = transport, backoff_s
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=self.transport,
                                       timeout=httpx.Timeout(self.timeout_s, connect=10.0), limits=limits)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop (others die with their loops)."""
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.aclose()

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        last = ""
        for attempt in range(self.retries + 1):
            try:
                resp = await self._client().request(method, path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                last = f"{type(exc).__name__}: {exc or 'connection failed'}"
            except httpx.TimeoutException as exc:
                # not retried: the engine may still be working on it, and a retry would double its load
                raise EngineUnavailable(f"engine at {self.base_url} did not answer {path} within "
                                        f"{self.timeout_s:.0f} s ({type(exc).__name__})") from None
            else:
                if resp.status_code in (502, 503, 504):
                    last = f"HTTP {resp.status_code}: {_error_message(resp)}"
                elif resp.status_code >= 400:
                    raise EngineError(resp.status_code, _error_message(resp))
                else:
                    return resp.json()
            if attempt < self.retries:
                await asyncio.sleep(self.backoff_s * (2**attempt))
        raise EngineUnavailable(f"engine at {self.base_url} unavailable after {self.retries + 1} attempts: {last}")

    async def complete(self, *, model: str, prompt_ids: Sequence[int], max_tokens: int, temperature: float,
                       top_p: float, stop: Sequence[str] | None = None, seed: int | None = None,
                       n: int = 1) -> list[Completion]:
        body: dict[str, Any] = {
            "model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
            "top_p": top_p, "n": n, "logprobs": 0, "return_token_ids": True,
        }
        if stop:
            body["stop"] = list(stop)
        if seed is not None:
            body["seed"] = seed
        data = await self.request("POST", "/v1/completions", body)
        return [_completion(choice, prompt_ids) for choice in data.get("choices", [])]

    async def models(self) -> list[dict[str, Any]]:
        return list((await self.request("GET", "/v1/models")).get("data", []))


def _completion(choice: dict[str, Any], sent: Sequence[int]) -> Completion:
    token_ids = choice.get("token_ids")
    if token_ids is None:
        raise EngineError(200, "the engine did not return token_ids (it must support return_token_ids)")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
    return Completion(
        prompt_ids=tuple(choice.get("prompt_token_ids") or sent), token_ids=tuple(token_ids),
        logprobs=tuple(float(x) if x is not None else 0.0 for x in logprobs), text=choice.get("text", ""),
        finish_reason=choice.get("finish_reason"),
    )


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", err))
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:500]
