"""An eval's rows and result: what is stored, compared and shown."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindforge.eval.stats import Paired


class EvalRow(BaseModel):
    """One task and sample, as the parquet shards store it."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    family: str
    mode: str  # greedy | sampled
    sample: int
    route: str  # the route the router chose (the adapter that answered)
    status: str  # the sandbox verdict: pass | fail | infra_error
    passed: bool
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # engine time of the turn's hops
    finish_reason: str | None = None


class EvalResult(BaseModel):
    """One eval; ``summary()`` is the object every ``--json`` prints."""

    model_config = ConfigDict(frozen=True)

    cycle: int
    bench: str
    key: str  # benchmark, HCP hash and adapters, samples, subset: the same key is never scored twice
    n: int
    pass_at_1: float = Field(serialization_alias="pass@1")
    se: float
    pass_at_k: dict[str, float] = Field(default_factory=dict)  # "pass@k" -> value (with samples)
    routing: dict[str, dict[str, float]]  # family -> route -> share of requests
    by_route: dict[str, dict[str, float]]  # route -> {"n", "pass@1"}
    hcp: str
    adapters: dict[str, str]  # route -> served adapter version
    vs_previous: Paired | None = None
    vs_cycle0: Paired | None = None
    previous_cycle: int | None = None
    seconds: float  # wall time of the scoring this run did (0 when every shard was reused)
    reused: bool  # every shard came from an earlier eval with the same key
    completion_tokens: int
    infra_errors: int = 0
    subset: str = ""  # "" or "first N tasks by id hash": says so wherever the number is shown
    # What the engine computed in (settings.engine_dtype, or what the engine reports): evals are compared
    # only with evals of the same dtype, since bfloat16 alone moves some greedy answers.
    engine_dtype: str = "float32"

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cycle": self.cycle, "bench": self.bench, "n": self.n,
                               "pass@1": self.pass_at_1, "se": self.se, "routing": self.routing,
                               "by_route": self.by_route, **self.pass_at_k, "hcp": self.hcp,
                               "adapters": self.adapters, "key": self.key, "seconds": self.seconds,
                               "reused": self.reused, "completion_tokens": self.completion_tokens}
        if self.subset:
            out["subset"] = self.subset
        if self.engine_dtype != "float32":
            out["engine_dtype"] = self.engine_dtype
        if self.cycle > 0:
            out["vs_previous"] = None if self.vs_previous is None else {
                "cycle": self.previous_cycle, **self.vs_previous.model_dump()}
            out["vs_cycle0"] = None if self.vs_cycle0 is None else self.vs_cycle0.model_dump()
        return out
