"""Choosing the next token of each row, and the logprob the contract promises for it.

The logprob returned for a sampled token is its log-probability under the
distribution it was drawn from: logits divided by the temperature, the
nucleus (``top_p``) kept and renormalised. At temperature 1 and top_p 1 that
is exactly the model's log-softmax, which is what the trainer's
teacher-forced forward computes and the handoff parity probe compares.
Greedy decoding (temperature 0) has no distribution to speak of; it reports
the model's own log-softmax (temperature 1), the number a caller can use.

Every choice owns a ``torch.Generator``: a request with a ``seed`` draws the
same tokens whatever else shares its batch. ``draw_batch`` takes a whole
batch's logits: greedy rows share one log-softmax and one argmax (per-row
calls cost more than the step's attention at large batches); sampled rows
draw one by one, each from its own generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # how many top alternatives to report per token (0: only the sampled one)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Draw:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, logprob), best first; empty unless asked for


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def sampling_logprobs(logits_V: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Log-probabilities of the distribution a row samples from (``-inf`` outside the nucleus)."""
    logits_V = logits_V.float()
    if params.greedy:
        return torch.log_softmax(logits_V, dim=-1)
    logp_V = torch.log_softmax(logits_V / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_V, order_V = torch.sort(logp_V, descending=True)
        cum_V = torch.cumsum(sorted_V.exp(), dim=-1)
        # keep a token while the mass before it is below top_p (the top token always stays)
        drop_V = (cum_V - sorted_V.exp()) >= params.top_p
        sorted_V = sorted_V.masked_fill(drop_V, float("-inf"))
        logp_V = torch.full_like(logp_V, float("-inf")).scatter(0, order_V, sorted_V)
        logp_V = logp_V - torch.logsumexp(logp_V, dim=-1)
    return logp_V


def draw(logits_V: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> Draw:
    logp_V = sampling_logprobs(logits_V, params)
    if params.greedy:
        token = int(torch.argmax(logp_V))
    else:
        token = int(torch.multinomial(logp_V.exp(), 1, generator=generator))
    return Draw(token, float(logp_V[token]), _top(logp_V, params.logprobs))


def draw_batch(logits_B_V: torch.Tensor, params: Sequence[SamplingParams],
               generators: Sequence[torch.Generator]) -> list[Draw]:
    """``draw`` for every row; the same tokens and logprobs, greedy rows computed together."""
    draws: list[Draw | None] = [None] * len(params)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        # an all-greedy batch (the common case) needs no gathered copy of the logits
        chosen = logits_B_V if len(greedy) == len(params) else logits_B_V[greedy]
        logp_G_V = torch.log_softmax(chosen.float(), dim=-1)
        tokens_G = torch.argmax(logp_G_V, dim=-1)
        logprobs = logp_G_V.gather(1, tokens_G[:, None])[:, 0].tolist()
        for g, (i, token, logprob) in enumerate(zip(greedy, tokens_G.tolist(), logprobs, strict=True)):
            draws[i] = Draw(token, logprob, _top(logp_G_V[g], params[i].logprobs))
    for i, p in enumerate(params):
        if draws[i] is None:
            draws[i] = draw(logits_B_V[i], p, generators[i])
    return draws


def _top(logp_V: torch.Tensor, k: int | None) -> tuple[tuple[int, float], ...]:
    if not k:
        return ()
    values_K, ids_K = torch.topk(logp_V, min(k, logp_V.shape[-1]))
    return tuple((int(i), float(v)) for i, v in zip(ids_K.tolist(), values_K.tolist(), strict=True))
