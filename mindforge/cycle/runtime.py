"""The real stage runners: each opens its stage's live services from the run's, runs it, returns JSON.

``library_runners(run, log)`` maps stage names to the plain library calls.
``run`` is the ``RunServices`` the cycle built once
(``mindforge.run_services.open_run_services``); every stage of every cycle
of the run uses its engine and catalog, and Update's handoff loads a
promoted version into that engine, so the next cycle serves it. A flow on a
Dask or Ray task runner passes a ``mapper`` (``mindforge.fanout``) so that
Discovery's judgements, Expansion's solves and the eval's shards run as its
tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mindforge.cycle.core import StageRunner
from mindforge.discovery import runtime as discovery_rt
from mindforge.discovery.stage import run_discovery
from mindforge.eval import runtime as eval_rt
from mindforge.eval.stage import run_eval
from mindforge.expansion import runtime as expansion_rt
from mindforge.expansion.stage import run_expansion
from mindforge.fanout import Mapper
from mindforge.run_services import RunServices
from mindforge.update import runtime as update_rt
from mindforge.update.stage import run_update


def _runner(open_services: Callable[..., Any], run_stage: Callable[[Any, Any], Any], run: RunServices,
            **options: Any) -> StageRunner:
    """config -> the stage's result as JSON, its live services opened for the call and closed after."""

    def go(config: Any) -> Mapping[str, Any]:
        with open_services(run, config, **options) as services:
            return as_json(run_stage(config, services))

    return go


def discovery_runner(run: RunServices, log: Callable[[str], None], mapper: Mapper | None = None) -> StageRunner:
    """``mapper``: where candidates are judged (None: a thread pool here; see ``mindforge.fanout``)."""
    return _runner(discovery_rt.open_services, run_discovery, run, log=log, mapper=mapper)


def expansion_runner(run: RunServices, log: Callable[[str], None], mapper: Mapper | None = None) -> StageRunner:
    """``mapper``: where task sets are solved (None: one call here; see ``mindforge.fanout``)."""
    return _runner(expansion_rt.open_services, run_expansion, run, log=log, mapper=mapper)


def update_runner(run: RunServices, progress: Callable[[int, int, Any], None] | None = None,
                  log: Callable[[str], None] = lambda m: None) -> StageRunner:
    return _runner(update_rt.open_services, run_update, run, progress=progress, log=log)


def eval_runner(run: RunServices, log: Callable[[str], None], mapper: Mapper | None = None) -> StageRunner:
    """``mapper``: where missing shards are scored (None: two at a time in threads here)."""
    return _runner(eval_rt.open_services, run_eval, run, log=log, mapper=mapper)


def library_runners(run: RunServices, log: Callable[[str], None] = lambda m: None,
                    progress: Callable[[int, int, Any], None] | None = None) -> dict[str, StageRunner]:
    return {
        "discovery": discovery_runner(run, log),
        "expansion": expansion_runner(run, log),
        "update": update_runner(run, progress, log),
        "eval": eval_runner(run, log),
    }


def as_json(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    return dict(result)
