"""Parameters of an RSI cycle run, and the per-stage configurations built from them.

One frozen model describes a run of N cycles. Stage knobs are plain
dictionaries of the stage's own config fields (``ExpansionConfig``,
``UpdateConfig``, Discovery's config), so a new stage option needs no change
here; they are validated into the stage's model before anything runs, and a
bad field is reported with its JSON path (``/expansion/budget``).

``run_dir`` and ``cycle`` are set by the cycle, never by the stage dicts: a
stage of cycle N always reads and writes ``RUN_DIR/cycles/N/<stage>/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindforge.errors import InputError, pydantic_problems
from mindforge.settings import EngineBackend
from mindforge.store import STAGES

Stage = Literal["discovery", "expansion", "update", "eval"]
TaskRunnerKind = Literal["thread", "dask", "ray"]
_OWNED = ("run_dir", "cycle")


class CycleConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path
    cycles: int = Field(default=1, ge=1, description="How many cycles to run")
    first_cycle: int | None = Field(default=None, ge=1, description="None: resume at the first unfinished cycle")
    stages: tuple[Stage, ...] = Field(default=STAGES, description="Stages to run; without discovery, seed tasks are used")
    discovery: dict[str, Any] = Field(default_factory=dict, description="Discovery config fields")
    expansion: dict[str, Any] = Field(default_factory=dict, description="ExpansionConfig fields")
    update: dict[str, Any] = Field(default_factory=dict, description="UpdateConfig fields")
    eval: dict[str, Any] = Field(default_factory=dict, description="EvalConfig fields (the sealed benchmark eval "
                                                                    "after every cycle, and the cycle-0 baseline)")
    eval_at_ends: dict[str, Any] = Field(
        default_factory=dict, description="EvalConfig fields that replace eval's for the cycle-0 baseline and "
                                          "the last of these cycles, the comparison the run is judged by "
                                          "(e.g. {max_tasks: null}: the whole benchmark there, a subset between)")
    engine: EngineBackend | None = Field(
        default=None, description="Engine started for the run when none runs: embedded or vllm "
                                  "(None: MINDFORGE_ENGINE_BACKEND, else embedded)")
    task_runner: TaskRunnerKind = Field(default="thread", description="Prefect task runner for fan-out")
    task_runner_options: dict[str, Any] = Field(default_factory=dict, description="e.g. {'address': 'tcp://...'}")
    max_workers: int = Field(default=2, ge=1, description="Thread pool size for the local task runner")

    @field_validator("stages")
    @classmethod
    def _ordered(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("at least one stage")
        # Stages always run in cycle order, whatever order they were listed in.
        return tuple(s for s in STAGES if s in v)

    @field_validator("discovery", "expansion", "update", "eval", "eval_at_ends")
    @classmethod
    def _not_owned(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = [k for k in _OWNED if k in v]
        if clash:
            raise ValueError(f"{', '.join(clash)} are set by the cycle, not per stage")
        return v


def load_cycle_config(source: str, data: dict[str, Any]) -> CycleConfig:
    """Validate ``data`` into a CycleConfig; errors name ``source`` and the JSON path."""
    try:
        return CycleConfig.model_validate(data)
    except ValidationError as exc:
        where, problem = pydantic_problems(exc)[0]
        raise InputError(source, where, problem) from None


def _build(model: type[BaseModel], stage: str, fields: dict[str, Any], **owned: Any) -> Any:
    try:
        return model(**{**fields, **owned})
    except ValidationError as exc:
        where, problem = pydantic_problems(exc)[0]
        raise InputError("cycle parameters", f"/{stage}{where if where != '/' else ''}", problem) from None


def expansion_config(config: CycleConfig, cycle: int) -> Any:
    from mindforge.expansion.config import ExpansionConfig

    return _build(ExpansionConfig, "expansion", config.expansion, run_dir=config.run_dir, cycle=cycle)


def update_config(config: CycleConfig, cycle: int, hcp: Path | None = None) -> Any:
    """Update of cycle N starts from the HCP Expansion chose in the same cycle (``hcp``)."""
    from mindforge.update.stage import UpdateConfig

    fields = dict(config.update)
    if hcp is not None:
        fields["hcp"] = hcp
    return _build(UpdateConfig, "update", fields, run_dir=config.run_dir, cycle=cycle)


def discovery_config(config: CycleConfig, cycle: int) -> Any:
    from mindforge.discovery.config import DiscoveryConfig

    return _build(DiscoveryConfig, "discovery", config.discovery, run_dir=config.run_dir, cycle=cycle)


def eval_config(config: CycleConfig, cycle: int) -> Any:
    """The eval after cycle ``cycle`` (0: the baseline before the first cycle); ``eval_at_ends`` applies
    at cycle 0 and at the last cycle (known once ``first_cycle`` is set, as ``run_cycles`` sets it)."""
    from mindforge.eval.config import EvalConfig

    last = None if config.first_cycle is None else config.first_cycle + config.cycles - 1
    if config.eval_at_ends and cycle in (0, last):
        return _build(EvalConfig, "eval_at_ends", {**config.eval, **config.eval_at_ends}, run_dir=config.run_dir,
                      cycle=cycle)
    return _build(EvalConfig, "eval", config.eval, run_dir=config.run_dir, cycle=cycle)


def validate_stage_configs(config: CycleConfig, cycle: int, skip: tuple[str, ...] = ()) -> None:
    """Fail before any work when a stage's fields are wrong (Update's HCP comes later)."""
    builders = {"discovery": discovery_config, "expansion": expansion_config, "update": update_config,
                "eval": eval_config}
    for stage in (s for s in config.stages if s not in skip):
        builders[stage](config, cycle)
    if "eval" in config.stages and "eval" not in skip:
        eval_config(config, 0)  # eval_at_ends too, though the cycle that uses it comes last
