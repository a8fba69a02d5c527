"""Solve-rate estimation with sequential sampling and a Wilson interval.

A task's learning value for the current model is p(1 - p): nothing is learnt
from a task always solved or never solved. p is estimated from attempts made
by the model itself; an attempt that ended in an infrastructure error is not
an attempt (it says nothing about the model) and is never counted.

Sampling is sequential: ``min_samples`` attempts first; if they all agree
(all passes or all failures) the task is settled as too easy or too hard
without spending more; otherwise batches of ``min_samples`` more continue
until the interval lies inside the band or wholly outside it. At
``max_samples`` the solve rate itself decides: 2 of 12 is a task the model
solves now and then, the one rejection sampling learns most from, though
its interval reaches below 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict


class Difficulty(BaseModel):
    model_config = ConfigDict(frozen=True)

    passes: int
    attempts: int
    infra_errors: int
    low: float
    high: float
    decision: str  # in_band | too_easy | too_hard | no_attempts (journals of earlier versions: undecided)

    @property
    def rate(self) -> float:
        return self.passes / self.attempts if self.attempts else 0.0

    @property
    def learnability(self) -> float:
        return self.rate * (1.0 - self.rate)


def wilson(passes: int, n: int, confidence: float = 0.9) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible at p near 0 or 1, unlike Wald)."""
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def decide(passes: int, n: int, band: tuple[float, float], confidence: float, final: bool) -> str | None:
    """in_band / too_easy / too_hard when the interval settles it, or when ``final`` the solve rate."""
    lo, hi = wilson(passes, n, confidence)
    if band[0] <= lo and hi <= band[1]:
        return "in_band"
    if lo > band[1] or (final and passes / n > band[1]):
        return "too_easy"
    if hi < band[0] or (final and passes / n < band[0]):
        return "too_hard"
    return "in_band" if final else None


Attempts = Callable[[int, int], Sequence[bool | None]]
"""(first sample index, count) -> one entry per attempt: True pass, False fail, None infra error."""


def measure(attempt: Attempts, band: tuple[float, float], confidence: float,
            min_samples: int, max_samples: int, max_infra: int | None = None) -> Difficulty:
    """Sequentially sample ``attempt`` until the solve rate's place against ``band`` is settled."""
    passes = n = infra = issued = 0
    max_infra = max_samples if max_infra is None else max_infra
    batch = min_samples
    while True:
        results = list(attempt(issued, batch))
        issued += len(results)
        infra += sum(r is None for r in results)
        n += sum(r is not None for r in results)
        passes += sum(r is True for r in results)
        if infra > max_infra:
            lo, hi = wilson(passes, n, confidence)
            return Difficulty(passes=passes, attempts=n, infra_errors=infra, low=lo, high=hi,
                              decision="no_attempts")
        if n < min_samples:
            batch = min_samples - n
            continue
        if passes in (0, n) and n == min_samples and n > 0:
            decision = "too_hard" if passes == 0 else "too_easy"  # the early stop: all agree
        else:
            decision = decide(passes, n, band, confidence, final=n >= max_samples)
        if decision is not None:
            lo, hi = wilson(passes, n, confidence)
            return Difficulty(passes=passes, attempts=n, infra_errors=infra, low=lo, high=hi, decision=decision)
        # as many again: each batch waits for the slowest of its answers, and a round for its slowest task
        batch = min(max(min_samples, 2), max_samples - n)
