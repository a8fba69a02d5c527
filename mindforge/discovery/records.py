"""What the Discovery stage returns (its per-candidate ``Decision`` lives in ``mindforge.tasks.decisions``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    # a generated kind's generators ("function/count_char"), most accepted first: how spread the yield is
    by_generator: dict[str, dict[str, int]] = Field(default_factory=dict)
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
