"""Discovery's decision on one candidate: written by Discovery (``rejected.parquet``, its journal) and read by
Update, which learns from the candidates verified in the sandbox but rejected for their measured difficulty."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

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
