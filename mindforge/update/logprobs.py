"""Log-probabilities of completion tokens only, the output projection applied in chunks.

A causal LM's full logits are ``tokens x vocabulary`` floats (49k columns for
the default model): for a GRPO batch that is gigabytes, almost all of it for
prompt positions no loss reads. Here the decoder runs without its head, the
hidden states of the positions that predict a trained token are gathered,
and the head is applied ``chunk`` positions at a time under activation
checkpointing, so one chunk's logits exist at a time, in the forward and
again in the backward.

Tokens are scored under the distribution the engine sampled them from:
logits divided by the temperature and, when ``top_p < 1``, renormalised over
the nucleus (the sampled token always counted in it), as
``mindforge.engine.sampling`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from mindforge.update.samples import Sample


@dataclass
class Parts:
    """The decoder (no head) and the output projection of a (peft-wrapped) causal LM."""

    body: Any
    head: Any

    @classmethod
    def of(cls, model: Any) -> Parts:
        causal = model.get_base_model() if hasattr(model, "get_base_model") else model
        return cls(body=causal.get_decoder(), head=causal.get_output_embeddings())


@dataclass
class Targets:
    """Flattened trained positions of a micro-batch, in sample order then position order."""

    rows_N: torch.Tensor  # sample index
    cols_N: torch.Tensor  # position of the trained token in the sample's ids
    tokens_N: torch.Tensor
    old_N: torch.Tensor
    adv_N: torch.Tensor
    temp_N: torch.Tensor
    top_p_N: torch.Tensor

    @classmethod
    def of(cls, samples: Sequence[Sample], device: Any = "cpu") -> Targets:
        rows, cols, toks, old, adv, temp, top_p = [], [], [], [], [], [], []
        for i, s in enumerate(samples):
            for t, on in enumerate(s.mask):
                if on:
                    rows.append(i)
                    cols.append(t)
                    toks.append(s.ids[t])
                    old.append(s.old_logprobs[t])
                    adv.append(s.advantage)
                    temp.append(s.temperature)
                    top_p.append(s.top_p)

        def f(x: list[float]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.float32, device=device)

        def i64(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.long, device=device)

        return cls(i64(rows), i64(cols), i64(toks), f(old), f(adv), f(temp), f(top_p))


def right_padded(rows: Sequence[Sequence[int]], pad: int, device: Any = "cpu") -> torch.Tensor:
    """Rows padded on the right: under a causal mask padding never reaches a real position."""
    width = max(len(r) for r in rows)
    ids_BT = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids_BT[i, : len(r)] = torch.tensor(list(r), dtype=torch.long, device=device)
    return ids_BT


def _nucleus_logp(logits_CV: torch.Tensor, tokens_C: torch.Tensor, temp_C: torch.Tensor,
                  top_p_C: torch.Tensor) -> torch.Tensor:
    wide_CV = logits_CV if logits_CV.dtype == torch.float64 else logits_CV.float()  # fp32 at least
    logp_CV = torch.log_softmax(wide_CV / temp_C[:, None], dim=-1)
    token_C = logp_CV.gather(1, tokens_C[:, None]).squeeze(1)
    if bool((top_p_C >= 1.0).all()):
        return token_C
    with torch.no_grad():  # membership of the nucleus is a choice, not a function to differentiate
        sorted_CV, order_CV = torch.sort(logp_CV, dim=-1, descending=True)
        p_CV = sorted_CV.exp()
        drop_sorted_CV = (torch.cumsum(p_CV, dim=-1) - p_CV) >= top_p_C[:, None]
        drop_CV = torch.zeros_like(drop_sorted_CV).scatter(1, order_CV, drop_sorted_CV)
        drop_CV.scatter_(1, tokens_C[:, None], False)
    kept_C = torch.logsumexp(logp_CV.masked_fill(drop_CV, float("-inf")), dim=-1)
    return token_C - kept_C


def chunked_token_logprobs(head: Any, hidden_ND: torch.Tensor, targets: Targets, chunk: int = 256) -> torch.Tensor:
    """logp of ``targets.tokens_N`` given the hidden states that predict them, ``chunk`` rows at a time."""
    out = []
    for start in range(0, hidden_ND.shape[0], chunk):
        sl = slice(start, start + chunk)

        def piece(h_CD: torch.Tensor, tok_C: torch.Tensor, t_C: torch.Tensor, p_C: torch.Tensor) -> torch.Tensor:
            return _nucleus_logp(head(h_CD), tok_C, t_C, p_C)

        args = (hidden_ND[sl], targets.tokens_N[sl], targets.temp_N[sl], targets.top_p_N[sl])
        if torch.is_grad_enabled() and hidden_ND.requires_grad:
            out.append(checkpoint(piece, *args, use_reentrant=False))
        else:
            out.append(piece(*args))
    return torch.cat(out) if out else hidden_ND.new_zeros(0)


def naive_logprobs(parts: Parts, samples: Sequence[Sample], targets: Targets, *, pad: int = 0,
                   chunk: int = 256) -> torch.Tensor:
    """Every sample forwarded whole (prompt included), trained positions scored in chunks."""
    device = targets.tokens_N.device
    ids_BT = right_padded([s.ids for s in samples], pad, device)
    hidden_BTD = parts.body(input_ids=ids_BT, use_cache=False).last_hidden_state
    hidden_ND = hidden_BTD[targets.rows_N, targets.cols_N - 1]  # position t-1 predicts token t
    return chunked_token_logprobs(parts.head, hidden_ND, targets, chunk)
