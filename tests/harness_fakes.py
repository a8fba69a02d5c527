"""A stand-in engine for unit tests of the harness and proxy (httpx MockTransport).

It answers /v1/completions like the engine contract says (token_ids with the
end token, prompt_token_ids, sampled logprobs) from a script, and records
every request so tests can compare what the engine saw with what the harness
recorded. Integration tests use the real engine instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from mindforge.harness import ChatRenderer, EngineClient, Harness, renderer_for
from mindforge.hcp import apply_patch, load_hcp, parse_hcp
from mindforge.paths import default_hcp_path

DEFAULT_HCP = default_hcp_path()


def model_path() -> Path:
    from mindforge.engine.registry import resolve_model
    from mindforge.settings import load_settings

    return resolve_model("smollm2-135m-instruct", load_settings())


def renderer() -> ChatRenderer:
    return renderer_for(model_path())


def make_hcp(ops: list[dict] | None = None):
    doc = load_hcp(DEFAULT_HCP).to_document()
    return parse_hcp(apply_patch(doc, ops or [], "test"), "test") if ops else load_hcp(DEFAULT_HCP)


def route_request_of(content: str) -> str:
    """The request inside a route hop's user message, before the route prompt (MoL's order) or after it."""
    last = re.search(r"\nRequest:\n(.*)\n\nLabel \(", content, re.DOTALL)
    return last.group(1) if last else content.split("\n\nRead the request above")[0]


class FakeEngine:
    """``answer(kind, request_text, prompt_text) -> completion text``; kind is route, summary or answer."""

    def __init__(self, r: ChatRenderer, answer: Callable[[str, str, str], str] | None = None):
        self.r, self.answer = r, answer or self.default_answer
        self.requests: list[dict] = []
        self.down = False

    @staticmethod
    def default_answer(kind: str, request: str, prompt: str) -> str:
        if kind == "route":
            m = re.search(r"\b(L[0-3])\b", request)
            return m.group(1) if m else "banana"
        if kind == "summary":
            return f"Summary of: {request[:30]}"
        return f"Answer to: {request[:40]}"

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content)
        self.requests.append(body)
        prompt_ids = body["prompt"]
        text = self.r.decode(prompt_ids, skip_special_tokens=False)
        kind = "route" if text.endswith("model_id=") else "answer"
        if kind == "answer" and "In one or two short sentences" in text[-300:]:
            kind = "summary"
        users = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text, re.DOTALL)
        request_text = users[-1] if users else ""
        if kind == "summary" and len(users) > 1:
            request_text = users[-2]
        out = self.answer(kind, route_request_of(request_text) if kind == "route" else request_text, text)
        ids = list(self.r.encode(out)) + [self.r.eos_id]
        choice = {"index": 0, "text": out, "finish_reason": "stop", "token_ids": ids, "prompt_token_ids": prompt_ids,
                  "logprobs": {"tokens": [], "token_logprobs": [-0.5] * len(ids), "top_logprobs": None}}
        return httpx.Response(200, json={"id": "cmpl-x", "object": "text_completion", "model": body["model"],
                                         "choices": [choice], "usage": {}})

    def client(self) -> EngineClient:
        return EngineClient("http://engine.test", transport=httpx.MockTransport(self.handler), retries=1,
                            backoff_s=0.0)

    def harness(self, hcp=None) -> Harness:
        return Harness(hcp or make_hcp(), self.client(), self.r)
