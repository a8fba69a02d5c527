"""The Discovery stage's configuration: one frozen model, read once.

Why the knobs exist (the ways published task-synthesis pipelines go wrong):

- ``band``, ``confidence``, ``min_samples``, ``max_samples``: a task is kept
  when the Wilson interval of the current model's solve rate lies inside the
  band, or, after ``max_samples`` attempts, when the rate itself does, so
  learnability is never read off two lucky samples; sampling stops early once
  the first ``min_samples`` attempts agree or the interval is decided.
- ``temperature``: the answer sampling of those attempts (see the field).
- ``near_duplicate``: n-gram Jaccard over prompt and tests above it is a
  near-duplicate of the archive (all cycles and the seeds).
- ``decontaminate``: datasets the solver is evaluated on; a task too close to
  one of their prompts is rejected (``../shared/data/mbpp/`` is added when
  present).
- ``budget``: candidates proposed and judged this cycle (the unit a rerun
  resumes in).
- ``round_size``: candidates are planned a round at a time; the kinds and the
  generators of the next round are drawn on the acceptances so far (see
  ``stage.draw_arm``): a fixed difficulty wastes a small model's budget
  on tasks it always or never solves.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mindforge.tasks.models import Route

PROPOSERS = ("procedural", "model")


class DiscoveryConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path
    cycle: int = Field(default=1, ge=0)
    budget: int = Field(default=40, ge=1, description="Candidates proposed and judged")
    hcp: Path | None = None  # None: the run's latest HCP, else the packaged default.hcp.json
    seed_tasks: Path | None = None  # None: the packaged seed tasks (mindforge/data/seed_tasks)
    families: tuple[Route, ...] = ()  # empty: every family
    proposers: tuple[str, ...] = PROPOSERS
    model_share: float = Field(default=0.1, ge=0.0, le=1.0, description="Share of the budget the model proposes")
    examples: int = Field(default=3, ge=1, le=8, description="Reference tasks shown to the model proposer")
    propose_max_tokens: int = Field(default=384, ge=16, le=8192)
    seed: int = 0
    round_size: int = Field(default=16, ge=1, description="Candidates planned together; the draws adapt between "
                                                            "rounds")
    reference_runs: int = Field(default=2, ge=2, le=32, description="Sandbox runs the reference must pass")
    # difficulty
    band: tuple[float, float] = (0.1, 0.9)
    confidence: float = Field(default=0.9, gt=0.5, lt=1.0)
    min_samples: int = Field(default=4, ge=1, le=64)
    max_samples: int = Field(default=12, ge=1, le=256)
    max_tokens: int = Field(default=160, ge=8, le=4096, description="Solver tokens per answer")
    # The solve rate that says what the model can learn from is the one at the temperature its training
    # samples at (rejection sampling's attempts, 0.8), not the HCP's near-greedy answer sampling (0.2),
    # where most tasks come out 0 of 4 or 4 of 4 and nothing is learnable. None: the HCP's own.
    temperature: float | None = Field(default=0.8, ge=0.0, le=2.0, description="Answer sampling temperature "
                                                                               "of the solve-rate attempts")
    measure_difficulty: bool = True  # False: verified tasks are kept without solving (no engine needed)
    # cheap checks
    max_prompt_chars: int = Field(default=4000, ge=16)
    max_reference_chars: int = Field(default=8000, ge=1)
    max_tests: int = Field(default=32, ge=1)
    # novelty
    near_duplicate: float = Field(default=0.8, gt=0.0, le=1.0)
    contamination: float = Field(default=0.6, gt=0.0, le=1.0)
    decontaminate: tuple[Path, ...] = ()
    mbpp_dir: Path | None = Path("../shared/data/mbpp")

    @model_validator(mode="after")
    def _check(self) -> DiscoveryConfig:
        lo, hi = self.band
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"band must satisfy 0 <= low < high <= 1, got {self.band}")
        if self.min_samples > self.max_samples:
            raise ValueError("min_samples must not exceed max_samples")
        unknown = [p for p in self.proposers if p not in PROPOSERS]
        if unknown or not self.proposers:
            raise ValueError(f"unknown or no proposers {list(self.proposers)}; expected some of {PROPOSERS}")
        return self
