"""The harness as Update and Expansion reach it: probe prompts, runner factories, the reflect role."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness_fakes import FakeEngine, make_hcp, model_path, renderer

from mindforge.harness import task_runner
from mindforge.run_services import RunServices
from mindforge.settings import Settings
from mindforge.tasks.models import Task
from mindforge.update.runtime import _probe_renderer, _runner_factory

TASK = Task(family="L2", prompt="Write add(a, b).", output_kind="function", entry_point="add",
            tests=[{"name": "t", "code": "assert add(1, 2) == 3"}], reference="def add(a, b): return a + b")


def test_probe_prompts_are_the_ids_a_pinned_turn_sends() -> None:
    hcp = make_hcp()
    probe = _probe_renderer(model_path())(hcp.to_document(), "L2", TASK)
    eng = FakeEngine(renderer())
    run = task_runner(eng.harness(hcp), route="L2")
    asyncio.run(run(TASK, 3, None))
    assert eng.requests[0]["model"] == "mf-L2-v0000" and eng.requests[0]["prompt"] == probe


def test_update_runner_factory_builds_a_turn_runner_per_document() -> None:
    run = RunServices(run_dir=Path("/nonexistent"), settings=Settings(), model_path=model_path(),
                      engine_url="http://127.0.0.1:9")
    factory = _runner_factory(run, run.engine_client())
    runner = factory(make_hcp().to_document(), 16)
    assert callable(runner)
