"""What Discovery decides about each candidate, and what the stage returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

REASONS = ("malformed", "nondeterministic", "duplicate", "contaminated", "reference_fails", "flaky",
           "non_discriminating", "too_easy", "too_hard", "undecided", "infra_error")


class Decision(BaseModel):
    """One candidate's fate. ``task`` is the candidate as a Task dump when it parsed."""

    model_config = ConfigDict(frozen=True)

    index: int
    proposer: str
    parents: tuple[str, ...] = ()
    accepted: bool
    reason: str | None = None  # one of REASONS when rejected
    detail: str = ""
    task_id: str | None = None
    family: str | None = None
    task: dict[str, Any] | None = None
    passes: int | None = None
    attempts: int | None = None
    infra_errors: int = 0
    solve_rate: float | None = None
    interval: tuple[float, float] | None = None
    learnability: float | None = None
    log: tuple[str, ...] = ()
    seconds: float = 0.0


class DiscoveryResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    cycle: int
    accepted: int
    by_family: dict[str, int]
    rejected: dict[str, int]
    dataset: str
    rejected_path: str
    candidates: int
    by_proposer: dict[str, dict[str, int]] = Field(default_factory=dict)
    acceptance_rate: float
    tasks_per_minute: float
    seconds: float
    hcp_version: str | None = None
    accepted_rows: list[dict[str, Any]] = Field(default_factory=list)
    rejection_rows: list[dict[str, Any]] = Field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``mindforge discover --json`` ends with."""
        return {"accepted": self.accepted, "by_family": self.by_family, "rejected": self.rejected,
                "dataset": self.dataset}
