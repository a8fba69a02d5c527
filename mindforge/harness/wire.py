"""OpenAI wire formats the proxy speaks: request models, history parsing, response bodies.

Requests are validated here so that every refusal names the field
(``messages[2].content``) and says what was expected. Nothing here talks to
the engine or knows adapter names: the bodies built here carry the public
model name only.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindforge.harness.harness import ToolResult, TurnRecord


class WireError(Exception):
    """An OpenAI-style error answer: status, message, the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def validation_error(exc: ValidationError) -> WireError:
    first = exc.errors()[0]
    param = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in first["loc"]).replace(".[", "[")
    return WireError(400, f"{param or 'body'}: {first['msg']}", param=param or None)


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown OpenAI options are accepted and ignored


class Message(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))
        return self.content or ""


class ChatRequest(_Loose):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=1)
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, t in enumerate(v or []):
            fn = t.get("function") if isinstance(t, dict) else None
            if t.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}")
        return v

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class ResponsesRequest(_Loose):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    seed: int | None = None

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, v: bool) -> bool:
        if v:
            raise ValueError("streaming is supported on /v1/chat/completions only; send stream=false")
        return v

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """Responses tools are flat ({type, name, parameters}); the harness takes the chat form."""
        if self.tools is None:
            return None
        out = []
        for i, t in enumerate(self.tools):
            if t.get("type") != "function" or not isinstance(t.get("name"), str):
                raise WireError(400, f"tools[{i}]: expected {{'type': 'function', 'name': ...}}", f"tools[{i}]")
            out.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                          if k in t}})
        return out


def parse(model: type[BaseModel], body: Any) -> Any:
    if not isinstance(body, dict):
        raise WireError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


# ---------------------------------------------------------------------- responses input
def responses_input(req: ResponsesRequest) -> tuple[str | None, list[ToolResult]]:
    """(new user text, tool results) from a Responses ``input``."""
    if isinstance(req.input, str):
        return req.input, []
    texts, results = [], []
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        if kind == "function_call_output":
            out = item.get("output")
            results.append(ToolResult(out if isinstance(out, str) else json.dumps(out), item.get("call_id", "")))
        elif kind == "message" and item.get("role") in ("user", "system", "developer"):
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise WireError(400, f"input[{i}].content: expected text", f"input[{i}].content")
            texts.append(content)
        else:
            raise WireError(400, f"input[{i}]: expected a user message or a function_call_output", f"input[{i}]")
    if texts and results:
        raise WireError(400, "input: send either tool outputs or a new message, not both", "input")
    return ("\n\n".join(texts) if texts else None), results


# ---------------------------------------------------------------------- bodies
def chat_body(record: TurnRecord, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": record.answer}
    if record.pending_tool_calls:
        message["tool_calls"] = [c.openai() for c in record.pending_tool_calls]
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": finish(record)}], "usage": record.usage}


def finish(record: TurnRecord) -> str:
    if record.pending_tool_calls:
        return "tool_calls"
    return "length" if record.finish_reason == "length" else "stop"


def chat_chunks(record: TurnRecord, model: str, piece_chars: int = 16) -> list[dict[str, Any]]:
    """The answer as ``chat.completion.chunk`` events (the turn has finished when they are sent)."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = record.answer
    out += [chunk({"content": text[i:i + piece_chars]}) for i in range(0, len(text), piece_chars)]
    for i, call in enumerate(record.pending_tool_calls):
        out.append(chunk({"tool_calls": [{"index": i, **call.openai()}]}))
    out.append(chunk({}, finish(record)))
    return out


def responses_body(record: TurnRecord, model: str, rid: str, previous: str | None) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if record.answer or not record.pending_tool_calls:
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": record.answer, "annotations": []}]})
    for call in record.pending_tool_calls:
        output.append({"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name,
                       "arguments": call.openai()["function"]["arguments"], "status": "completed"})
    u = record.usage
    return {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed", "model": model,
            "output": output, "previous_response_id": previous, "parallel_tool_calls": True, "tools": [],
            "tool_choice": "auto", "error": None, "incomplete_details": None, "metadata": {},
            "usage": {"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"],
                      "total_tokens": u["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}
