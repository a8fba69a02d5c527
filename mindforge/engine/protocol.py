"""Request bodies and response shapes of the engine's vLLM-compatible HTTP API.

Unknown fields are ignored, as vLLM and OpenAI clients expect (clients send
``user``, ``stream_options`` and the like); known fields are checked, and a
bad one is answered with a 400 that names it. Features a caller could rely
on but this engine does not have (``stream``, ``echo``, ``best_of``) are
refused by name rather than silently ignored.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from mindforge.engine.sampling import SamplingParams
from mindforge.engine.sequence import ChoiceResult, GenerationResult


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=64)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[StrictInt] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool = False
    stream: bool = False
    best_of: int | None = None

    @model_validator(mode="after")
    def _unsupported(self) -> _Sampling:
        if self.stream:
            raise ValueError("stream: streaming is not supported by the embedded engine (send stream=false)")
        if self.best_of not in (None, self.n):
            raise ValueError("best_of: only best_of == n (or unset) is supported")
        return self

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        return tuple(s for s in stops if s)

    def sampling(self, max_tokens: int, logprobs: int | None) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens, temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p, n=self.n, seed=self.seed, stop=self.stops(),
            stop_token_ids=tuple(self.stop_token_ids or ()), ignore_eos=self.ignore_eos, logprobs=logprobs)


class CompletionRequest(_Sampling):
    prompt: str | list[StrictInt]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, value: str | list[int]) -> str | list[int]:
        if len(value) == 0:
            raise ValueError("prompt is empty: expected a string or a non-empty list of token ids")
        return value

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise ValueError("echo is not supported (use return_token_ids for the prompt's ids)")
        return value


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # tool_calls, name, tool_call_id travel to the chat template

    role: str = Field(min_length=1)
    content: str | list[dict[str, Any]] | None = None

    def for_template(self) -> dict[str, Any]:
        out = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):  # OpenAI content parts: the text ones, joined
            out["content"] = "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        out.setdefault("content", "")
        return out


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True


class LoadAdapterRequest(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadAdapterRequest(BaseModel):
    lora_name: str = Field(min_length=1)


# ---------------------------------------------------------------- responses
def _usage(result: GenerationResult) -> dict[str, Any]:
    prompt = len(result.prompt_ids)
    completion = sum(len(c.token_ids) for c in result.choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens}}


def _completion_logprobs(choice: ChoiceResult, tokenizer) -> dict[str, Any]:
    tokens = [tokenizer.decode([t]) for t in choice.token_ids]
    offsets, pos = [], 0
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    tops = [{tokenizer.decode([t]): lp for t, lp in top} if top else None for top in choice.top_logprobs]
    return {"tokens": tokens, "token_logprobs": choice.logprobs, "top_logprobs": tops, "text_offset": offsets}


def completion_response(model: str, result: GenerationResult, req: CompletionRequest, tokenizer) -> dict[str, Any]:
    choices = []
    for c in result.choices:
        item: dict[str, Any] = {"index": c.index, "text": c.text, "finish_reason": c.finish_reason,
                                "logprobs": _completion_logprobs(c, tokenizer) if req.logprobs is not None else None}
        if req.return_token_ids:
            item["token_ids"] = c.token_ids
            item["prompt_token_ids"] = result.prompt_ids
        choices.append(item)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(result)}


def _chat_logprobs(choice: ChoiceResult, tokenizer) -> dict[str, Any]:
    def entry(token_id: int, lp: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": lp, "bytes": list(text.encode())}

    content = []
    for tid, lp, top in zip(choice.token_ids, choice.logprobs, choice.top_logprobs, strict=True):
        content.append({**entry(tid, lp), "top_logprobs": [entry(t, v) for t, v in top]})
    return {"content": content}


def chat_response(model: str, result: GenerationResult, req: ChatRequest, tokenizer) -> dict[str, Any]:
    choices = []
    for c in result.choices:
        item: dict[str, Any] = {"index": c.index, "message": {"role": "assistant", "content": c.text},
                                "finish_reason": c.finish_reason,
                                "logprobs": _chat_logprobs(c, tokenizer) if req.logprobs else None}
        if req.return_token_ids:
            item["token_ids"] = c.token_ids
            item["prompt_token_ids"] = result.prompt_ids
        choices.append(item)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(result)}
