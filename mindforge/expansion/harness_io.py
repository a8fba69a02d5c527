"""The production harness as Expansion's turn runner and reflector.

``harness_runner_for(url, settings)`` returns ``(runner_for, close)``:
``runner_for(hcp)`` is a rollouts ``TurnRunner`` that runs one user turn of a
task through the harness of that HCP version against the engine at ``url``;
``HarnessReflector`` runs the HCP's ``reflect`` role through the same harness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindforge.errors import MindForgeError
from mindforge.hcp import HCP
from mindforge.settings import Settings


class MissingHarness(MindForgeError):
    pass


def _harness() -> Any:
    import importlib

    try:
        return importlib.import_module("mindforge.harness")
    except ImportError as exc:
        raise MissingHarness(f"mindforge.harness is needed to solve tasks and is not importable: {exc}") from None


def harness_runner_for(url: str, settings: Settings) -> tuple[Callable[[HCP], Any], Callable[[], None]]:
    harness = _harness()
    from mindforge.engine.registry import resolve_model

    model_path = resolve_model(settings.model, settings)
    client = harness.EngineClient(url, api_key=settings.api_key)  # pooled per event loop; loops close theirs

    def runner_for(hcp: HCP) -> Any:
        return harness.task_runner(harness.open_harness(hcp, url, model_path, settings, client=client))

    runner_for.harness_for = lambda hcp: harness.open_harness(hcp, url, model_path, settings,  # type: ignore[attr-defined]
                                                              client=client)
    return runner_for, lambda: None


class HarnessReflector:
    """Runs the HCP's ``reflect`` role through the production harness (one hop, default route)."""

    def __init__(self, runner_for: Callable[[HCP], Any]):
        self.runner_for = runner_for

    def reflect(self, hcp: HCP, prompt: str, seed: int) -> str:
        import asyncio

        harness_for = getattr(self.runner_for, "harness_for", None)
        if harness_for is None:
            raise MissingHarness("the runner factory was not built by harness_runner_for")
        record = asyncio.run(harness_for(hcp).role("reflect", prompt, seed=seed))
        return record.answer
