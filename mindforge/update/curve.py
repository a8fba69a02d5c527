"""One row a GRPO step: the numbers ``curve.json``, the tracker and the flow's table show.

The row is computed from the step's rollout groups (rewards, lengths, signal)
and the trainer's metrics (loss, KL, clip fraction, grad norm), so the curve
holds every tracked number even where no tracker runs. ``CurveRow.scalars``
is the one mapping from a row to tracker tags: TensorBoard shows exactly the
values ``curve.json`` holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from mindforge.rollouts import reward_stats
from mindforge.tasks.models import Trajectory


class CurveRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    mean_reward: float
    loss: float
    kl: float
    clip_fraction: float
    tokens: int
    groups: int
    skipped_groups: int
    dropped: int
    seconds: float
    # Defaults: rows written before these were recorded still read back.
    reward_std: float = 0.0  # population std of the step's rewards: the spread GRPO learns from
    grad_norm: float = 0.0  # before clipping
    completion_tokens: float = 0.0  # mean completion tokens a scored trajectory (all its hops)
    no_signal_share: float = 0.0  # share of groups whose rewards are all equal: zero advantage

    def scalars(self) -> dict[str, float]:
        return {
            "train/reward_mean": self.mean_reward, "train/reward_std": self.reward_std,
            "train/loss": self.loss, "train/kl": self.kl, "train/clip_fraction": self.clip_fraction,
            "train/grad_norm": self.grad_norm, "train/completion_tokens": self.completion_tokens,
            "train/no_signal_share": self.no_signal_share, "train/tokens": float(self.tokens),
            "train/seconds": self.seconds,
        }


def curve_row(step: int, groups: Sequence[Sequence[Trajectory]], m: dict[str, Any], seconds: float) -> CurveRow:
    """``m``: the trainer's metrics for the step (empty when no group was usable)."""
    stats = reward_stats(groups)
    scored = [t for g in groups for t in g if t.reward is not None]
    rewards = [float(t.reward) for t in scored if t.reward is not None]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    flat = [len({t.reward for t in g if t.reward is not None}) <= 1 for g in groups]

    def num(*keys: str) -> float:
        for k in keys:
            if m.get(k) is not None:
                return float(m[k])
        return 0.0

    return CurveRow(
        step=step, mean_reward=mean,
        loss=num("loss"), kl=num("kl", "kl_mean"), clip_fraction=num("clip_fraction", "clip_frac"),
        tokens=int(num("tokens", "completion_tokens", "num_tokens")),
        groups=len(groups), skipped_groups=int(num("skipped_groups", "groups_skipped")),
        dropped=stats.dropped, seconds=seconds,
        reward_std=math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0,
        grad_norm=num("grad_norm"),
        completion_tokens=(sum(len(h.completion_ids) for t in scored for h in t.hops) / len(scored)
                           if scored else 0.0),
        no_signal_share=sum(flat) / len(flat) if flat else 0.0,
    )
