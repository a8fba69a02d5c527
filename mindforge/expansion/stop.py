"""Why the search ends. Every ending has a kind and a sentence; none is silent.

Checked before each proposal, in this order: the candidate budget, the
rollout budget, the time budget, patience (``patience`` evaluated candidates
in a row without an acceptance; acceptance already requires a gain above
the noise floor, so a gain below it never resets patience), a streak of
duplicate or near-duplicate proposals, and a cap on proposals of any kind
(malformed ones cost no rollouts, so without a cap a junk-writing reflector
could loop forever). After proposing, no proposer having anything left is
``exhausted``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mindforge.expansion.config import ExpansionConfig


@dataclass
class Progress:
    proposals: int = 0
    evaluated: int = 0
    accepted: int = 0
    since_accept: int = 0
    duplicate_streak: int = 0
    rollouts: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class Stop:
    kind: str  # budget | rollouts | time | patience | duplicates | proposal_limit | exhausted
    reason: str


def check_stop(p: Progress, c: ExpansionConfig, noise_floor: float) -> Stop | None:
    if p.evaluated >= c.budget:
        return Stop("budget", f"evaluation budget spent: {p.evaluated} of {c.budget} candidate evaluations")
    if c.max_rollouts is not None and p.rollouts >= c.max_rollouts:
        return Stop("rollouts", f"rollout budget spent: {p.rollouts} of {c.max_rollouts} rollouts")
    if c.time_budget_s is not None and p.elapsed_s >= c.time_budget_s:
        return Stop("time", f"time budget spent: {p.elapsed_s:.0f}s of {c.time_budget_s:.0f}s")
    if p.since_accept >= c.patience:
        return Stop("patience", f"patience: {p.since_accept} candidates in a row without a validation gain "
                                f"above the noise floor ({noise_floor:.3f}) and the threshold")
    if p.duplicate_streak >= c.max_duplicates:
        return Stop("duplicates", f"{p.duplicate_streak} duplicate or near-duplicate proposals in a row")
    if p.proposals >= c.proposal_limit:
        return Stop("proposal_limit", f"{p.proposals} proposals made (limit {c.proposal_limit}), "
                                      f"{p.evaluated} of them evaluated")
    return None


def exhausted(p: Progress) -> Stop:
    return Stop("exhausted", f"no proposer has anything left to try after {p.proposals} proposals")
