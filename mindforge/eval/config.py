"""What one eval scores and how: one frozen config."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mindforge.settings import ENGINE_MAX_BATCH
from mindforge.tasks.benchmarks import DEFAULT
from mindforge.tasks.models import Route


class EvalConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path
    cycle: int = Field(default=0, ge=0, description="0: the baseline, before any cycle changed anything")
    bench: str = Field(default=DEFAULT, description="A registered benchmark (mindforge bench list)")
    samples: int = Field(default=0, ge=0, le=64,
                         description="0: greedy pass@1 only; K: also K samples a task at the HCP's answer "
                                     "sampling, for pass@k")
    max_tasks: int | None = Field(default=None, ge=1,
                                  description="A fixed subset (the same tasks every cycle); None: all")
    concurrency: int = Field(default=ENGINE_MAX_BATCH, ge=1,
                             description="Requests in flight, over every shard scored at once (the engine "
                                         "batches them; the default is the embedded engine's batch)")
    chunk: int = Field(default=64, ge=1, description="Tasks a results shard; a killed eval resumes at a shard")
    seed: int = 0
    pin_route: Route | None = Field(
        default=None, description="A diagnostic, not the cycle's number: every task answered by this route "
                                  "with no route hop (oracle routing), to measure what routing costs")
    hcp: Path | None = Field(default=None, description="A diagnostic: score this HCP file (and the adapter "
                                                       "versions it names) instead of the one in force")
    adapters_from: Path | None = Field(
        default=None, description="A diagnostic: serve the adapter versions this HCP file names, with the "
                                  "scored HCP's prompts and settings (an ablation of Expansion against Update)")

    @property
    def diagnostic(self) -> bool:
        """Scored beside the cycle's eval, never as it."""
        return self.pin_route is not None or self.hcp is not None or self.adapters_from is not None
