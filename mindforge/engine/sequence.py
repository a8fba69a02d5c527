"""Requests as the scheduler sees them, and the per-choice state that decides when a choice ends."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field

import torch

from mindforge.engine.kv import RowKV
from mindforge.engine.sampling import Draw, SamplingParams
from mindforge.errors import MindForgeError


class UnknownModel(MindForgeError):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        super().__init__(f"model {name!r} is not served here; known: {', '.join(known) or '(none)'}")


class EngineBusyError(MindForgeError):
    pass


@dataclass
class GenerationRequest:
    """One completion call: ``n`` choices continuing ``prompt_ids`` on ``model`` (base or adapter name)."""

    model: str
    prompt_ids: list[int]
    params: SamplingParams
    skip_special_tokens: bool = True
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    submitted_at: float = field(default_factory=time.perf_counter)
    # set by the scheduler at prefill
    started_at: float = 0.0
    prefill_s: float = 0.0
    cached_tokens: int = 0


@dataclass(frozen=True)
class ChoiceResult:
    index: int
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[tuple[tuple[int, float], ...]]
    text: str
    finish_reason: str  # "stop" | "length"


@dataclass(frozen=True)
class GenerationResult:
    prompt_ids: list[int]
    choices: list[ChoiceResult]
    cached_tokens: int  # prompt tokens taken from the prefix cache
    queue_s: float
    prefill_s: float
    total_s: float


@dataclass
class Row:
    """One choice being decoded: the state that travels with its row of the batch."""

    request: GenerationRequest
    index: int
    slot: str  # peft slot of the adapter, or the base marker
    cache_key: object  # prefix-cache slot (differs from ``slot`` only for the base)
    generator: torch.Generator
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    out_top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""
    prompt_kv: RowKV | None = None  # the shared prompt keys/values, until the row joins the batch

    @property
    def params(self) -> SamplingParams:
        return self.request.params

    @property
    def last_token(self) -> int:
        return self.out_ids[-1]

    @property
    def sequence(self) -> list[int]:
        return self.request.prompt_ids + self.out_ids

    def append(self, d: Draw, tokenizer, eos_ids: frozenset[int], max_positions: int) -> None:
        """Record a sampled token and decide whether the choice ends with it."""
        self.out_ids.append(d.token)
        self.out_logprobs.append(d.logprob)
        self.out_top.append(d.top)
        p = self.params
        ended_by_token = (d.token in eos_ids and not p.ignore_eos) or d.token in p.stop_token_ids
        if ended_by_token or (p.stop and self._hit_stop_string(tokenizer)):
            self.finish_reason = "stop"
        elif len(self.out_ids) >= p.max_tokens or len(self.sequence) >= max_positions:
            self.finish_reason = "length"

    def _hit_stop_string(self, tokenizer) -> bool:
        text = tokenizer.decode(self.out_ids, skip_special_tokens=self.request.skip_special_tokens)
        cut = min((i for i in (text.find(s) for s in self.params.stop) if i >= 0), default=-1)
        if cut < 0:
            return False
        self.text = text[:cut]
        return True

    def result(self, tokenizer, eos_ids: frozenset[int]) -> ChoiceResult:
        text = self.text
        if not (self.params.stop and self.finish_reason == "stop" and self._stopped_by_string(eos_ids)):
            ids = self.out_ids
            if ids and self.finish_reason == "stop" and (ids[-1] in eos_ids or ids[-1] in self.params.stop_token_ids):
                ids = ids[:-1]  # the end token is returned in token_ids, never in the text
            text = tokenizer.decode(ids, skip_special_tokens=self.request.skip_special_tokens)
        return ChoiceResult(self.index, list(self.out_ids), list(self.out_logprobs), list(self.out_top), text,
                            self.finish_reason or "length")

    def _stopped_by_string(self, eos_ids: frozenset[int]) -> bool:
        last = self.out_ids[-1]
        return not ((last in eos_ids and not self.params.ignore_eos) or last in self.params.stop_token_ids)
