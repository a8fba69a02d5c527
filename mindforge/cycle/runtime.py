"""The real stage runners: each opens its stage's live services from the run's, runs it, returns JSON.

``library_runners(run, log)`` maps stage names to the plain library calls.
``run`` is the ``RunServices`` the cycle built once
(``mindforge.run_services.open_run_services``); every stage of every cycle
of the run uses its engine and catalog, and Update's handoff loads a
promoted version into that engine, so the next cycle serves it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mindforge.cycle.core import StageRunner
from mindforge.run_services import RunServices


def discovery_runner(run: RunServices, log: Callable[[str], None]) -> StageRunner:
    def go(config: Any) -> Mapping[str, Any]:
        from mindforge.discovery.runtime import open_services
        from mindforge.discovery.stage import run_discovery

        with open_services(run, config, log=log) as services:
            return as_json(run_discovery(config, services))

    return go


def expansion_runner(run: RunServices, log: Callable[[str], None]) -> StageRunner:
    def go(config: Any) -> Mapping[str, Any]:
        from mindforge.expansion.runtime import open_services
        from mindforge.expansion.stage import run_expansion

        with open_services(run, config, log=log) as services:
            return as_json(run_expansion(config, services))

    return go


def update_runner(run: RunServices, progress: Callable[[int, int, Any], None] | None = None) -> StageRunner:
    def go(config: Any) -> Mapping[str, Any]:
        from mindforge.update.runtime import open_services
        from mindforge.update.stage import run_update

        with open_services(run, config, progress=progress) as services:
            return as_json(run_update(config, services))

    return go


def eval_runner(run: RunServices, log: Callable[[str], None]) -> StageRunner:
    def go(config: Any) -> Mapping[str, Any]:
        from mindforge.eval.runtime import open_services
        from mindforge.eval.stage import run_eval

        with open_services(run, config, log=log) as services:
            return as_json(run_eval(config, services))

    return go


def library_runners(run: RunServices, log: Callable[[str], None] = lambda m: None,
                    progress: Callable[[int, int, Any], None] | None = None) -> dict[str, StageRunner]:
    return {
        "discovery": discovery_runner(run, log),
        "expansion": expansion_runner(run, log),
        "update": update_runner(run, progress),
        "eval": eval_runner(run, log),
    }


def as_json(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    return dict(result)
