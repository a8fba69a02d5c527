"""Rollout scoring against the real sandbox: tool calls in a session, verdicts, rewards, drops.

The turn runner here is scripted (it stands in for the harness and engine,
which have their own tests and are exercised by tests/test_update_stage.py);
everything after the turn is real: the tool session container, the
transcript the sandbox replays, the verdict and the reward.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from helpers import require

from mindforge.paths import seed_tasks_dir
from mindforge.rollouts import (
    RolloutConfig,
    TurnOutcome,
    groups_for_training,
    rollout_groups,
)
from mindforge.tasks.io import load_tasks
from mindforge.tasks.models import Hop, VerdictStatus

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def pool():
    require(subprocess.run(["docker", "info"], check=False, capture_output=True).returncode == 0, "Docker engine not running")
    from mindforge.sandbox import SandboxConfig, SandboxPool

    with SandboxPool(SandboxConfig(pool_size=2, test_timeout_s=5.0, job_timeout_s=30.0)) as p:
        yield p


def _task(prompt: str):
    return next(t for t in load_tasks(seed_tasks_dir()) if t.prompt == prompt)


def _hop(text: str) -> Hop:
    return Hop(kind="answer", route="L1", adapter="mf-L1-v0000", prompt_ids=(1, 2), completion_ids=(3,),
               logprobs=(-0.1,), text=text)


def scripted(task, seed, tools):
    """Sample k follows script k: right call, wrong quantity, an engine failure, no call."""

    async def run():
        k = seen.setdefault(seed, len(seen))
        if k == 2:
            raise ConnectionError("engine went away")
        calls = []
        if k in (0, 1):
            args = {"item": "apple", "quantity": 3 if k == 0 else 2}
            result = await tools("add_to_cart", args)
            calls.append({"name": "add_to_cart", "arguments": args, "result": result})
        return TurnOutcome(answer="Done.", hops=[_hop("Done.")], calls=calls, route="L1")

    return run()


seen: dict[int, int] = {}


@pytest.mark.parametrize("kind", ["binary", "pass_fraction"])
def test_tool_rollouts_are_scored_by_the_sandbox_and_failures_dropped(pool, kind) -> None:
    seen.clear()
    task = _task("Add 3 apples to my cart.")
    groups = asyncio.run(rollout_groups(
        [task], scripted, pool, RolloutConfig(group_size=4, reward=kind, seed=0),
        hcp_version="h-test", route="L1", open_session=pool.session,
    ))
    (group,) = groups
    by_script = {seen[t.seed]: t for t in group}
    expected = {"binary": [1.0, 0.0, None, 0.0], "pass_fraction": [1.0, 2 / 3, None, 1 / 3]}[kind]
    assert [by_script[k].reward for k in range(4)] == pytest.approx(expected)
    assert by_script[0].verdict.status == VerdictStatus.PASS
    # The tool ran in the session container: its result is in the transcript.
    assert by_script[0].transcript[0]["name"] == "add_to_cart" and by_script[0].transcript[0]["result"] is not None
    assert by_script[2].verdict is None and "engine went away" in by_script[2].meta["dropped"]
    assert sorted(seen[t.seed] for t in groups_for_training(groups)[0]) == [0, 1, 3]


def test_code_answers_are_extracted_and_verified(pool) -> None:
    task = _task(next(t.prompt for t in load_tasks(seed_tasks_dir()) if t.entry_point == "clamp"))

    def runner(task_, seed, tools):
        async def run():
            body = task_.reference if seed % 2 == 0 else "def clamp(value, low, high):\n    return value\n"
            answer = f"Here you go:\n```python\n{body}```\nDone."
            return TurnOutcome(answer=answer, hops=[_hop(answer)], route="L2")

        return run()

    (group,) = asyncio.run(rollout_groups([task], runner, pool, RolloutConfig(group_size=4, seed=1),
                                          hcp_version="h-test", route="L2"))
    for t in group:
        assert t.reward == (1.0 if t.seed % 2 == 0 else 0.0), (t.seed, t.verdict)
