"""The GRPO objective per token, and how each loss type weighs tokens.

The per-token loss is TRL's: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``
with ``r = exp(logp - old_logp)``, ``old_logp`` the engine's logprob of the
sampled token, plus ``beta`` times the k3 estimate of KL to the reference
(``exp(ref - logp) - (ref - logp) - 1``).

The loss types differ only in how tokens are weighted, and the weights are
computed once for the whole step so that gradient accumulation over
micro-batches gives exactly the gradient of one big batch:

- ``grpo``: mean over each sequence's tokens, then mean over sequences;
- ``dr_grpo``: sum over tokens / (sequences x ``max_completion_length``), a
  constant that does not favour short or long answers;
- ``dapo``: sum over tokens / active tokens in the whole step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

LossType = Literal["grpo", "dr_grpo", "dapo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo")


def token_weights(active: Sequence[int], loss_type: LossType, max_completion_length: int) -> list[float]:
    """The weight of each active token of each sequence (one number a sequence)."""
    n = len(active)
    if n == 0:
        return []
    if loss_type == "grpo":
        return [1.0 / (n * max(a, 1)) for a in active]
    if loss_type == "dr_grpo":
        return [1.0 / (n * max_completion_length)] * n
    if loss_type == "dapo":
        total = max(sum(active), 1)
        return [1.0 / total] * n
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def k3_kl(logp_N: torch.Tensor, ref_logp_N: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): non-negative, unbiased in expectation."""
    delta_N = ref_logp_N - logp_N
    return torch.exp(delta_N) - delta_N - 1.0


def per_token_loss(
    logp_N: torch.Tensor, old_logp_N: torch.Tensor, adv_N: torch.Tensor, *,
    eps_low: float, eps_high: float, beta: float = 0.0, ref_logp_N: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss and detached per-token stats (``clipped``, ``kl``, ``ratio``)."""
    ratio_N = torch.exp(logp_N - old_logp_N)
    clipped_ratio_N = torch.clamp(ratio_N, 1.0 - eps_low, 1.0 + eps_high)
    loss_N = -torch.minimum(ratio_N * adv_N, clipped_ratio_N * adv_N)
    low = (ratio_N < 1.0 - eps_low) & (adv_N < 0)
    high = (ratio_N > 1.0 + eps_high) & (adv_N > 0)
    stats = {"clipped": (low | high).detach().float(), "ratio": ratio_N.detach()}
    if beta != 0.0:
        if ref_logp_N is None:
            raise ValueError("beta != 0 needs the reference logprobs")
        kl_N = k3_kl(logp_N, ref_logp_N)
        loss_N = loss_N + beta * kl_N
        stats["kl"] = kl_N.detach()
    return loss_N, stats
