"""The numbers an eval reports: pass@k, standard errors, paired comparisons with an exact McNemar test.

A comparison of two evals is paired on the tasks both scored: each task's
score (greedy pass: 0 or 1) before and after. The paired standard error is
the standard deviation of the per-task differences over sqrt(n); the
McNemar test asks whether the tasks that flipped (fail→pass ``gained``,
pass→fail ``lost``) are more lopsided than a fair coin would make them,
exactly (two-sided binomial tail), which is right for the small discordant
counts a 135M model produces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation over sqrt(n)); (0, 0) for no values."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: P(a split at least this lopsided | flips are fair coin tosses)."""
    flips = gained + lost
    if flips == 0:
        return 1.0
    tail = sum(math.comb(flips, i) for i in range(min(gained, lost) + 1)) / 2**flips
    return min(1.0, 2 * tail)


class Paired(BaseModel):
    model_config = ConfigDict(frozen=True)

    n: int  # tasks both evals scored
    before: float
    after: float
    diff: float  # after - before
    paired_se: float
    gained: int  # tasks failed before, passed after
    lost: int  # tasks passed before, failed after
    mcnemar_p: float


def paired(before: Mapping[str, float], after: Mapping[str, float]) -> Paired:
    """Compare two per-task score maps on the tasks they share."""
    common = sorted(set(before) & set(after))
    diffs = [after[t] - before[t] for t in common]
    diff, se = mean_se(diffs)
    gained = sum(1 for t in common if after[t] > before[t])
    lost = sum(1 for t in common if after[t] < before[t])
    b_mean = mean_se([before[t] for t in common])[0]
    a_mean = mean_se([after[t] for t in common])[0]
    return Paired(n=len(common), before=round(b_mean, 6), after=round(a_mean, 6), diff=round(diff, 6),
                  paired_se=round(se, 6), gained=gained, lost=lost, mcnemar_p=round(mcnemar_exact(gained, lost), 6))
