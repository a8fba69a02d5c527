"""The resident-prefix forward: a group's shared prompt once, its key/value state shared by G.

The G samples of a task begin with the same prompt ids. The naive step
forwards that prompt G times; here it is forwarded once with gradients on,
its per-layer keys and values are expanded to G views (``expand``: no copy
of the prompt's forward), and the G suffixes (completions, tool results)
run against them. The backward of ``expand`` sums the G views' gradients
into the one prompt forward, which is what the naive step's G prompt copies
add up to, so loss and gradients are the same up to float rounding.

The resident prefix stops before the first position whose hidden state
predicts a trained token, so every scored hidden state comes from the suffix
forward and the prefix contributes keys and values only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from mindforge.update.logprobs import Parts, Targets, chunked_token_logprobs, right_padded
from mindforge.update.samples import Sample


def shared_prefix_len(samples: Sequence[Sample]) -> int:
    """Leading ids every sample shares, stopping before the first hidden state a loss reads."""
    if not samples:
        return 0
    first = samples[0].ids
    n = min(len(s.ids) for s in samples)
    n = min(n, min(s.first_loss for s in samples) - 1)  # position first_loss-1 predicts a trained token
    k = 0
    while k < n and all(s.ids[k] == first[k] for s in samples):
        k += 1
    return k


def expanded_cache(prefix_cache: object, views: int) -> object:
    """A cache whose layers are the prefix's keys/values expanded (not copied) to ``views`` rows."""
    layers = [(layer.keys.expand(views, -1, -1, -1), layer.values.expand(views, -1, -1, -1))
              for layer in prefix_cache.layers]  # type: ignore[attr-defined]
    return DynamicCache(ddp_cache_data=layers)


def resident_prefix_logprobs(parts: Parts, samples: Sequence[Sample], targets: Targets, prefix_len: int, *,
                             pad: int = 0, chunk: int = 256) -> torch.Tensor:
    """The same numbers as ``naive_logprobs`` for samples sharing ``prefix_len`` leading ids."""
    if prefix_len < 1:
        raise ValueError("the resident prefix needs at least one shared id")
    device = targets.tokens_N.device
    prefix_1K = torch.tensor([list(samples[0].ids[:prefix_len])], dtype=torch.long, device=device)
    cache = parts.body(input_ids=prefix_1K, use_cache=True).cache
    views = expanded_cache(cache, len(samples))
    suffix_BS = right_padded([s.ids[prefix_len:] for s in samples], pad, device)
    hidden_BSD = parts.body(input_ids=suffix_BS, cache=views, use_cache=True).last_hidden_state
    hidden_ND = hidden_BSD[targets.rows_N, targets.cols_N - 1 - prefix_len]
    return chunked_token_logprobs(parts.head, hidden_ND, targets, chunk)


def resident_prefix_backward(parts: Parts, samples: Sequence[Sample], prefix_len: int,
                             loss_of: Callable[[int, Sequence[Sample], Targets, torch.Tensor], torch.Tensor], *,
                             batch: int, pad: int = 0, chunk: int = 256, device: object = "cpu") -> list[float]:
    """The resident-prefix step with the suffixes in micro-batches of ``batch``: one prefix forward.

    The prefix's keys/values are cut from its graph into leaves; each
    micro-batch of suffixes runs against expanded views of them and takes
    its backward (gradients gather in the LoRA weights and in the leaves);
    then the gathered key/value gradients flow back through the prefix
    forward once. The gradients equal the all-at-once step's; peak memory is
    the prefix plus one micro-batch. ``loss_of(first, sub, targets, logp_N)``
    returns a micro-batch's loss (``first``: index of ``sub[0]``).
    """
    prefix_1K = torch.tensor([list(samples[0].ids[:prefix_len])], dtype=torch.long, device=device)
    cache = parts.body(input_ids=prefix_1K, use_cache=True).cache
    kv = [(layer.keys, layer.values) for layer in cache.layers]  # type: ignore[attr-defined]
    # a layer's keys may not depend on trained weights (layer 0 when k_proj has no LoRA): no leaf gradient then
    leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
              for k, v in kv]
    losses = []
    for first in range(0, len(samples), batch):
        sub = samples[first : first + batch]
        targets = Targets.of(sub, device)
        views = DynamicCache(ddp_cache_data=[(k.expand(len(sub), -1, -1, -1), v.expand(len(sub), -1, -1, -1))
                                             for k, v in leaves])
        suffix_BS = right_padded([s.ids[prefix_len:] for s in sub], pad, device)
        hidden_BSD = parts.body(input_ids=suffix_BS, cache=views, use_cache=True).last_hidden_state
        logp_N = chunked_token_logprobs(parts.head, hidden_BSD[targets.rows_N, targets.cols_N - 1 - prefix_len],
                                        targets, chunk)
        loss = loss_of(first, sub, targets, logp_N)
        loss.backward()
        losses.append(float(loss.detach()))
    pairs = [(t, leaf.grad) for (k, v), (lk, lv) in zip(kv, leaves, strict=True)
             for t, leaf in ((k, lk), (v, lv)) if leaf.grad is not None]
    if pairs:
        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
    return losses
