"""A task as one harness turn: the ``TurnRunner`` that rollouts (Update, Expansion) call.

Each sample runs in a fresh session, so samples never see each other, with the
task's tools declared to the model and executed through the rollout's
``ToolCaller`` (the task's sandbox session). ``route`` pins the answer to one
route instead of asking the router; ``None`` is the production path.
``summarize=False`` leaves out the summary hop (Discovery's scored attempts
never read it).
"""

from __future__ import annotations

from typing import Any

from mindforge.harness.harness import Harness
from mindforge.rollouts import ToolCaller, TurnOutcome, TurnRunner
from mindforge.tasks.models import Task


def task_runner(harness: Harness, *, max_tokens: int | None = None, route: str | None = None,
                summarize: bool = True) -> TurnRunner:
    async def run(task: Task, seed: int, tools: ToolCaller | None) -> TurnOutcome:
        session = harness.new_session()
        record = await harness.turn(session, task.prompt, tools=[t.openai() for t in task.tools],
                                    tool_executor=tools, seed=seed, max_tokens=max_tokens, route=route,
                                    summarize=summarize)
        return TurnOutcome(answer=record.answer, hops=record.hops, calls=record.calls, route=record.route)

    return run


def probe_prompt_ids(harness: Harness, route: str, task: Task) -> list[int]:
    """The prompt ids of ``task``'s first answer hop on ``route`` (Update's parity probe)."""
    return harness.answer_prompt_ids(route, task.prompt, [t.openai() for t in task.tools])


def tool_specs(task: Task) -> list[dict[str, Any]]:
    return [t.openai() for t in task.tools]
