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
share one log-softmax and one nucleus search, and draw one by one, each
from its own generator.
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
    return _nucleus(logp_V, params.top_p) if params.top_p < 1.0 else logp_V


NUCLEUS_K = 64  # candidates a nucleus is looked for among before a row falls back to sorting its vocabulary


def draw(logits_V: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> Draw:
    return draw_batch(logits_V[None], [params], [generator])[0]


def draw_batch(logits_B_V: torch.Tensor, params: Sequence[SamplingParams],
               generators: Sequence[torch.Generator]) -> list[Draw]:
    """One draw a row, each from its own generator; the log-softmax and the nucleus search run for the batch.

    A row with ``top_p < 1`` looks for its nucleus among its ``NUCLEUS_K`` most likely tokens and samples
    among those it keeps: the same distribution as sorting the whole vocabulary, which cost more than the
    step's attention when each of 24 rows did it (the answer role samples at temperature 0.2, top_p 0.9: a
    nucleus of a few tokens). A row whose nucleus is wider falls back to the sort.
    """
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
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if sampled:
        temps_S = torch.tensor([params[i].temperature for i in sampled], dtype=torch.float32,
                               device=logits_B_V.device)
        chosen = logits_B_V if len(sampled) == len(params) else logits_B_V[sampled]
        logp_S_V = torch.log_softmax(chosen.float() / temps_S[:, None], dim=-1)
        nucleus = [s for s, i in enumerate(sampled) if params[i].top_p < 1.0]
        found: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if nucleus:
            k = min(NUCLEUS_K, logp_S_V.shape[-1])
            vals_N_K, ids_N_K = torch.topk(logp_S_V[nucleus], k, dim=-1)  # sorted, most likely first
            p_N_K = vals_N_K.exp()
            before_N_K = torch.cumsum(p_N_K, dim=-1) - p_N_K  # the mass of the tokens ranked above each
            for n, s in enumerate(nucleus):
                top_p = params[sampled[s]].top_p
                keep = int((before_N_K[n] < top_p).sum())  # the top token always stays
                if keep < k or k == logp_S_V.shape[-1]:  # the nucleus ends inside the candidates
                    found[s] = vals_N_K[n, :keep], ids_N_K[n, :keep]
        for s, i in enumerate(sampled):
            p, gen = params[i], generators[i]
            if s in found and (not p.logprobs or p.logprobs <= len(found[s][0])):
                vals, ids = found[s]
                vals = vals - torch.logsumexp(vals, dim=-1)
                j = int(torch.multinomial(vals.exp(), 1, generator=gen))
                draws[i] = Draw(int(ids[j]), float(vals[j]),
                                tuple((int(t), float(v)) for t, v in zip(ids[:p.logprobs].tolist(),
                                                                          vals[:p.logprobs].tolist(), strict=True))
                                if p.logprobs else ())
                continue
            logp_V = _nucleus(logp_S_V[s], p.top_p) if p.top_p < 1.0 else logp_S_V[s]
            token = int(torch.multinomial(logp_V.exp(), 1, generator=gen))
            draws[i] = Draw(token, float(logp_V[token]), _top(logp_V, p.logprobs))
    return draws  # type: ignore[return-value]


def _nucleus(logp_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logp_V`` with the tokens outside the nucleus at ``-inf``, renormalised (sorting the vocabulary)."""
    sorted_V, order_V = torch.sort(logp_V, descending=True)
    cum_V = torch.cumsum(sorted_V.exp(), dim=-1)
    # keep a token while the mass before it is below top_p (the top token always stays)
    drop_V = (cum_V - sorted_V.exp()) >= top_p
    sorted_V = sorted_V.masked_fill(drop_V, float("-inf"))
    logp_V = torch.full_like(logp_V, float("-inf")).scatter(0, order_V, sorted_V)
    return logp_V - torch.logsumexp(logp_V, dim=-1)


def _top(logp_V: torch.Tensor, k: int | None) -> tuple[tuple[int, float], ...]:
    if not k:
        return ()
    values_K, ids_K = torch.topk(logp_V, min(k, logp_V.shape[-1]))
    return tuple((int(i), float(v)) for i, v in zip(ids_K.tolist(), values_K.tolist(), strict=True))
