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
    _harness()
    raise MissingHarness("the harness wiring for Expansion is not written yet (waiting for mindforge.harness)")


class HarnessReflector:
    def __init__(self, runner_for: Callable[[HCP], Any]):
        self.runner_for = runner_for

    def reflect(self, hcp: HCP, prompt: str, seed: int) -> str:
        raise MissingHarness("the harness wiring for Expansion is not written yet (waiting for mindforge.harness)")
