"""Records the stage writes: one per proposal (the lineage), and the result.

A ``CandidateRecord`` is written to the journal once its fate is known:
refused before evaluation (with the policy's reason, zero rollouts), rejected
on the minibatch or on validation, or accepted. Standard errors that are
undefined (fewer than two tasks) are stored as ``None``, never as infinity,
so every record is plain JSON.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mindforge.expansion.scores import Summary

Outcome = Literal["accepted", "rejected", "refused"]


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


class ScoreRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    se: float | None
    n: int

    @classmethod
    def of(cls, s: Summary) -> ScoreRecord:
        return cls(mean=s.mean, se=finite(s.se), n=s.n)

    def text(self) -> str:
        se = "n/a" if self.se is None else f"{self.se:.3f}"
        return f"{self.mean:.3f} ± {se}"


class CandidateRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int  # proposal number, from 0; a resumed run continues the count
    proposer: str
    parent: str  # the incumbent's version the patch applies to
    hcp_hash: str | None = None  # None when refused before the patch could be applied
    patch: Any = None  # the operations as proposed (may be malformed)
    hypothesis: str = ""
    outcome: Outcome
    refusal: str | None = None  # policy kind: malformed, guarded, forbidden, rewrite, invalid, duplicate, ...
    stage: str | None = None  # "minibatch" | "validation" for evaluated candidates
    candidate: ScoreRecord | None = None  # validation (or minibatch) score of the candidate
    incumbent: ScoreRecord | None = None  # the incumbent on the same tasks
    gain: float | None = None
    se: float | None = None  # of the paired difference
    threshold: float | None = None
    noise_floor: float | None = None
    per_route: dict[str, float] = Field(default_factory=dict)
    reason: str = ""
    rollouts: int = 0
    seconds: float = 0.0

    @property
    def evaluated(self) -> bool:
        return self.outcome != "refused"

    def row(self) -> dict[str, Any]:
        """One row of the candidate table (flat, for a Prefect table artifact)."""
        return {
            "index": self.index,
            "hash": self.hcp_hash or "-",
            "parent": self.parent,
            "proposer": self.proposer,
            "hypothesis": self.hypothesis[:200],
            "validation": self.candidate.text() if self.candidate else "-",
            "incumbent": self.incumbent.text() if self.incumbent else "-",
            "gain": "-" if self.gain is None else f"{self.gain:+.3f}",
            "threshold": "-" if self.threshold is None else f"{self.threshold:.3f}",
            "decision": self.outcome + (f" ({self.refusal})" if self.refusal else ""),
            "reason": self.reason[:200],
        }


class BaselineRecord(BaseModel):
    """The incumbent's validation score and its noise floor (re-run with other seeds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hcp_hash: str
    validation: ScoreRecord
    rerun: ScoreRecord
    noise_gain: float
    noise_se: float | None
    noise_floor: float
    rollouts: int


class SolveRecord(BaseModel):
    """Rollouts spent outside candidate evaluations (the incumbent's train split, the test)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hcp_hash: str
    tag: str
    rollouts: int


class TestReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    start: ScoreRecord
    best: ScoreRecord
    gain: float
    se: float | None  # of the paired difference best - start


class ExpansionResult(BaseModel):
    """What the stage returns; also written as the stage's DONE.json."""

    model_config = ConfigDict(frozen=True)

    cycle: int
    start_hcp: str
    best_hcp: str
    start_hcp_path: str
    best_hcp_path: str
    stop_reason: str
    stop_kind: str
    proposals: int
    candidates: int  # evaluated
    accepted: int
    refused: int
    rollouts: int
    noise_floor: float
    validation: TestReport
    test: TestReport
    diff_markdown: str
    changed_paths: list[str]
    candidate_rows: list[dict[str, Any]]
    trajectory_rows: list[dict[str, Any]]
    audit_rows: list[dict[str, Any]]
    files: dict[str, str]
    elapsed_s: float

    def summary(self) -> dict[str, Any]:
        """The object ``mindforge expand --json`` prints last."""
        return {
            "start_hcp": self.start_hcp,
            "best_hcp": self.best_hcp,
            "stop_reason": self.stop_reason,
            "candidates": self.candidates,
            "accepted": self.accepted,
            "test": {
                "start": self.test.start.mean,
                "best": self.test.best.mean,
                "se": self.test.se,
                "start_se": self.test.start.se,
                "best_se": self.test.best.se,
                "n": self.test.best.n,
            },
        }
