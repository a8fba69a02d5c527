"""The harness's client for an engine that speaks the vLLM-shaped completions protocol.

Prompts go out as token ids and completions come back as token ids with
their logprobs (``return_token_ids``), so nothing between serving and
training is decoded and encoded again. Works against the embedded engine,
vLLM and SGLang alike.

Failure semantics the proxy and the stages rely on:

- the engine cannot be reached (refused, reset, timed out) after
  ``retries`` attempts: ``EngineUnavailable`` (the proxy answers 502);
- the engine answers with an error (unknown adapter, bad request):
  ``EngineError`` with the engine's own message and status;
- the answer lacks the ids or logprobs asked for: ``EngineError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import httpx

from mindforge.errors import MindForgeError

_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.RemoteProtocolError,
              httpx.WriteError, httpx.PoolTimeout)


class EngineUnavailable(MindForgeError):
    """The engine did not answer at all."""


class EngineError(MindForgeError):
    """The engine answered with an error, or without what was asked for."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Completion:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str | None


class EngineClient:
    """``async with EngineClient(url) as engine: await engine.complete(...)``."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 600.0,
                 connect_timeout_s: float = 5.0, retries: int = 2, backoff_s: float = 0.25,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = await self._http.request(method, path, json=body)
            except _RETRYABLE as exc:
                last = exc
                await asyncio.sleep(self.backoff_s * (2**attempt))
                continue
            except httpx.TimeoutException as exc:  # a read timeout: the engine is stuck, do not pile on
                raise EngineUnavailable(f"engine at {self.base_url} timed out on {path}: {exc!r}") from None
            if resp.status_code >= 400:
                raise EngineError(f"engine at {self.base_url} answered {resp.status_code} on {path}: "
                                  f"{_error_message(resp)}", resp.status_code)
            try:
                return resp.json()
            except ValueError:
                raise EngineError(f"engine at {self.base_url} sent non-JSON on {path}") from None
        raise EngineUnavailable(f"engine at {self.base_url} unreachable after {self.retries + 1} attempts: "
                                f"{type(last).__name__}: {last}")

    async def health(self) -> bool:
        try:
            resp = await self._http.get("/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def models(self) -> list[dict[str, Any]]:
        return list((await self._request("GET", "/v1/models")).get("data", []))

    async def complete(
        self, *, model: str, prompt_ids: Sequence[int], max_tokens: int, temperature: float = 1.0,
        top_p: float = 1.0, stop: Sequence[str] | None = None, seed: int | None = None, n: int = 1,
    ) -> list[Completion]:
        body: dict[str, Any] = {
            "model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens,
            "temperature": temperature, "top_p": top_p, "n": n, "logprobs": 1,
            "return_token_ids": True, "skip_special_tokens": False,
        }
        if stop:
            body["stop"] = list(stop)
        if seed is not None:
            body["seed"] = seed
        data = await self._request("POST", "/v1/completions", body)
        try:
            return [_completion(choice, prompt_ids) for choice in sorted(data["choices"], key=lambda c: c["index"])]
        except (KeyError, TypeError) as exc:
            raise EngineError(f"engine at {self.base_url} answered without token ids or logprobs "
                              f"({exc!r}); it must support return_token_ids and logprobs") from None


def _completion(choice: dict[str, Any], prompt_ids: Sequence[int]) -> Completion:
    ids = tuple(int(t) for t in choice["token_ids"])
    logprobs = tuple(float(x) for x in choice["logprobs"]["token_logprobs"])
    if len(logprobs) != len(ids):
        raise KeyError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
    prompt = choice.get("prompt_token_ids") or prompt_ids
    return Completion(prompt_ids=tuple(int(t) for t in prompt), token_ids=ids, logprobs=logprobs,
                      text=str(choice.get("text", "")), finish_reason=choice.get("finish_reason"))


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", body["error"]))[:500]
    return str(body)[:500]
