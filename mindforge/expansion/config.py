"""The Expansion stage's configuration: one frozen model, read once.

Why each knob exists (the failure modes of prompt and harness optimizers):

- ``k_se`` and ``min_delta``: a candidate is accepted only when its paired
  validation gain over the incumbent clears ``max(min_delta, k_se x SE)`` and
  the incumbent's own noise floor, so a lucky draw is not taken for progress.
- ``route_tolerance``: a gain on one route may not buy a regression on another.
- ``minibatch``: a candidate is first run on a few validation tasks; only
  candidates that are not clearly worse pay for the full validation split.
- ``patience``, ``budget``, ``max_rollouts``, ``time_budget_s``,
  ``max_duplicates``: every way the search can end, each recorded as the stop
  reason (the search never ends silently).
- ``train/validation/test`` fractions: reflection sees train only, the gate
  sees validation, the sealed test is scored once at the end.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mindforge.tasks.models import Route

PROPOSERS = ("reflect", "numeric", "structural")


class ExpansionConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path
    cycle: int = Field(default=1, ge=0)
    # inputs
    start_hcp: Path | None = None  # None: the packaged default.hcp.json
    tasks: Path | None = None  # JSONL file/folder or parquet folder; None: see use_seed_tasks
    use_seed_tasks: bool = True  # no Discovery output for the cycle: fall back to the packaged seeds
    families: tuple[Route, ...] = ()  # empty: every family
    max_tasks: int | None = Field(default=None, ge=3)
    # solving
    samples: int = Field(default=1, ge=1, le=64)
    seed: int = 0
    # splits (by task id hash; fractions of the tasks)
    train_fraction: float = Field(default=0.34, gt=0.0, lt=1.0)
    test_fraction: float = Field(default=0.33, gt=0.0, lt=1.0)
    # acceptance
    minibatch: int = Field(default=4, ge=1)
    k_se: float = Field(default=2.0, ge=0.0)
    min_delta: float = Field(default=0.05, ge=0.0)
    route_tolerance: float = Field(default=0.1, ge=0.0)
    remeasure_noise: bool = True  # measure the noise floor again for each new incumbent
    # proposing
    proposers: tuple[str, ...] = PROPOSERS
    reflect_examples: int = Field(default=3, ge=1, le=16)
    near_duplicate_ratio: float = Field(default=0.97, gt=0.0, le=1.0)
    # stopping
    patience: int = Field(default=4, ge=1)
    budget: int = Field(default=8, ge=0)  # candidate evaluations
    max_rollouts: int | None = Field(default=None, ge=1)
    time_budget_s: float | None = Field(default=None, gt=0.0)
    max_duplicates: int = Field(default=5, ge=1)
    max_proposals: int | None = Field(default=None, ge=1)  # None: 10 x budget + 10

    @model_validator(mode="after")
    def _check(self) -> ExpansionConfig:
        if self.train_fraction + self.test_fraction >= 1.0:
            raise ValueError("train_fraction + test_fraction must leave room for validation")
        unknown = [p for p in self.proposers if p not in PROPOSERS]
        if unknown:
            raise ValueError(f"unknown proposers {unknown}; expected some of {PROPOSERS}")
        return self

    @property
    def proposal_limit(self) -> int:
        return self.max_proposals if self.max_proposals is not None else 10 * self.budget + 10
