"""Rollouts for GRPO: G samples a task through the production harness, scored by the sandbox.

Invariants:

- every sample goes through the same harness turn the proxy serves (route,
  answer with tool turns, summary), so the token ids and logprobs in each
  ``Hop`` are the engine's own: training reads them as they are, nothing is
  decoded and encoded again;
- a reward comes only from a sandbox verdict (``binary``: 1 for a pass, else
  0; ``pass_fraction``: the share of checker tests passed);
- an infrastructure failure (an ``infra_error`` verdict, an engine or
  sandbox error during the turn) is never a reward: the trajectory is kept
  for inspection with ``reward=None`` and ``meta["dropped"]`` saying why,
  and ``groups_for_training`` leaves it out.

The harness is reached through ``TurnRunner``, one awaitable per sample, so
this module owns sampling, scoring and recording, and the stage owns how a
harness is built (which HCP, which engine, which served adapter).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from mindforge.inflight import InFlight, Line
from mindforge.store import write_parquet
from mindforge.tasks.models import Hop, Task, Trajectory, Verdict, VerdictStatus

RewardKind = Literal["binary", "pass_fraction"]
# The HCP's guarded verifier setting (``mindforge.hcp.models.RewardKind``) as a rollout reward.
HCP_REWARDS: dict[str, RewardKind] = {"binary": "binary", "fraction": "pass_fraction"}


@dataclass
class TurnOutcome:
    """What one harness turn produced: the final answer, every hop, the tool calls."""

    answer: str
    hops: Sequence[Hop]
    calls: Sequence[dict[str, Any]] = field(default_factory=list)  # name, arguments, result
    route: str | None = None  # the route the answer came from


class TurnRunner(Protocol):
    """Runs one harness turn for ``task`` with sampling ``seed``; ``tools`` runs tool calls."""

    def __call__(self, task: Task, seed: int, tools: ToolCaller | None) -> Awaitable[TurnOutcome]: ...


ToolCaller = Callable[[str, Any], Awaitable[Any]]
"""(tool name, arguments) -> result, executed in the task's sandbox session."""


class Verifier(Protocol):
    def verify_many(self, jobs: Sequence[tuple[Task, str]]) -> list[Verdict]: ...


class RolloutConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    group_size: int = Field(default=4, ge=1)
    reward: RewardKind = "binary"
    seed: int = 0
    concurrency: int = Field(default=16, ge=1)  # samples in flight: the engine batches them


# ---------------------------------------------------------------------- scoring
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def fenced_block(text: str, languages: Sequence[str]) -> str | None:
    """The first fenced block in one of ``languages`` (or unlabelled), if any."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for lang, body in blocks:
        if lang in languages:
            return body
    for lang, body in blocks:
        if not lang:
            return body
    return None


def candidate_for(task: Task, answer: str, calls: Sequence[dict[str, Any]]) -> str:
    """What the sandbox verifies for ``task`` given the model's answer and tool calls."""
    if task.output_kind == "function":
        code = fenced_block(answer, ("python", "py", "python3"))
        return code if code is not None else answer
    if task.output_kind == "html":
        html = fenced_block(answer, ("html",))
        return html if html is not None else answer
    if task.output_kind == "tool_calls":
        plain = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls]
        return json.dumps({"calls": plain, "answer": answer})
    return answer


def reward_of(verdict: Verdict, kind: RewardKind) -> float | None:
    """The reward of a verdict; None for an infrastructure error (never scored)."""
    if verdict.status == VerdictStatus.INFRA_ERROR:
        return None
    if kind == "binary":
        return 1.0 if verdict.status == VerdictStatus.PASS else 0.0
    return 1.0 if verdict.status == VerdictStatus.PASS else verdict.pass_fraction


# ---------------------------------------------------------------------- rollouts
SessionOpener = Callable[[Task], Any]
"""task -> a context manager yielding an object with ``call(name, arguments)``."""


async def _one_sample(
    task: Task, sample: int, seed: int, run: TurnRunner, open_session: SessionOpener | None,
    hcp_version: str, route: str,
) -> tuple[Trajectory, TurnOutcome | None]:
    base = {"task_id": task.id, "hcp_version": hcp_version, "route": route, "sample": sample, "seed": seed}
    try:
        if task.tools and open_session is not None:
            outcome = await _with_session(task, seed, run, open_session)
        else:
            outcome = await run(task, seed, None)
    except Exception as exc:  # noqa: BLE001 - an engine or sandbox failure: dropped, not scored
        return Trajectory(**base, meta={"dropped": f"turn failed: {type(exc).__name__}: {exc}"}), None
    traj = Trajectory(
        **{**base, "route": outcome.route or route}, hops=tuple(outcome.hops),
        transcript=tuple(dict(c) for c in outcome.calls), answer=outcome.answer,
    )
    return traj, outcome


async def _with_session(task: Task, seed: int, run: TurnRunner, open_session: SessionOpener) -> TurnOutcome:
    """Run the turn with a sandbox session for the task's tools, opened and closed off the loop."""
    cm = open_session(task)
    session = await asyncio.to_thread(cm.__enter__)
    try:

        async def call(name: str, arguments: Any) -> Any:
            return await asyncio.to_thread(session.call, name, arguments)

        outcome = await run(task, seed, call)
    except BaseException as exc:
        await asyncio.to_thread(cm.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await asyncio.to_thread(cm.__exit__, None, None, None)
    return outcome


async def rollout_groups(
    tasks: Sequence[Task],
    run: TurnRunner,
    verifier: Verifier,
    config: RolloutConfig,
    *,
    hcp_version: str,
    route: str,
    open_session: SessionOpener | None = None,
    seed_offset: int = 0,
    on_answer: Callable[[], None] | None = None,
    gate: Line | None = None,
) -> list[list[Trajectory]]:
    """``group_size`` samples of each task, verified and rewarded; one list a task.

    ``on_answer`` is called as each sample's turn ends (before verification), for a progress bar.
    ``gate``: this call's place in a bound shared with other calls, in other threads too
    (``InFlight.line()``; ``config.concurrency`` is then not read); None: this call keeps at most
    ``config.concurrency`` turns in flight.
    """
    gate = gate or asyncio.Semaphore(config.concurrency)

    async def gated(task: Task, sample: int) -> tuple[Trajectory, TurnOutcome | None]:
        seed = sample_seed(config.seed + seed_offset, task.id, sample)
        async with gate:
            out = await _one_sample(task, sample, seed, run, open_session, hcp_version, route)
        if on_answer is not None:
            on_answer()
        return out

    jobs = [(t, s) for t in tasks for s in range(config.group_size)]
    done = await asyncio.gather(*(gated(t, s) for t, s in jobs))
    to_verify = [(i, jobs[i][0], candidate_for(jobs[i][0], o.answer, o.calls))
                 for i, (_, o) in enumerate(done) if o is not None]
    verdicts = await asyncio.to_thread(verifier.verify_many, [(t, c) for _, t, c in to_verify])
    scored = [traj for traj, _ in done]
    for (i, _, _), verdict in zip(to_verify, verdicts, strict=True):
        r = reward_of(verdict, config.reward)
        meta = {} if r is not None else {"dropped": f"infra_error: {verdict.log[-300:]}"}
        scored[i] = scored[i].model_copy(update={"verdict": verdict, "reward": r, "meta": meta})
    g = config.group_size
    return [scored[k * g : (k + 1) * g] for k in range(len(tasks))]


class SandboxVerifier(Verifier, Protocol):
    """A verifier that also opens a task's tool session (a ``SandboxPool``)."""

    def session(self, task: Task) -> Any: ...


class HarnessSolver:
    """The current model solving tasks through the production harness of an HCP, judged by the sandbox.

    The one solver of every stage: Discovery's solve-rate attempts,
    Expansion's candidate scoring and the eval all call ``groups``; Update
    calls ``rollout_groups`` itself because it also pins routes and trains.
    ``runner_for(hcp)`` builds the turn runner (which hops, which caps).
    """

    def __init__(self, runner_for: Callable[[Any], TurnRunner], pool: SandboxVerifier, concurrency: int = 8):
        self.runner_for, self.pool, self.concurrency = runner_for, pool, concurrency
        # one bound for every call, whichever thread makes it: calls made side by side share it
        self.in_flight = InFlight(concurrency)

    def groups(self, hcp: Any, tasks: Sequence[Task], samples: int, seed: int, *,
               reward: RewardKind | None = None, seed_offset: int = 0,
               on_answer: Callable[[], None] | None = None) -> list[list[Trajectory]]:
        """``samples`` trajectories of each task (one list a task); the reward is the HCP's unless given."""
        from mindforge.hcp import hcp_hash

        config = RolloutConfig(group_size=samples, reward=reward or HCP_REWARDS[hcp.guarded.verifier.reward],
                               seed=seed, concurrency=self.concurrency)
        return asyncio.run(rollout_groups(
            tasks, self.runner_for(hcp), self.pool, config, hcp_version=hcp_hash(hcp),
            route=hcp.router.default_route, open_session=self.pool.session, seed_offset=seed_offset,
            on_answer=on_answer, gate=self.in_flight.line(),
        ))


def sample_seed(seed: int, task_id: str, sample: int) -> int:
    """A per-sample engine seed: reproducible, distinct across tasks and samples."""
    import hashlib

    digest = hashlib.sha256(f"{seed}|{task_id}|{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def dropped_reason(tr: Trajectory) -> str | None:
    """Why a trajectory is an infrastructure error (counted for nothing: never scored, never a failure),
    or None when it has a verdict."""
    if "dropped" in tr.meta:
        return tr.meta["dropped"]
    if tr.verdict is None:
        return "no verdict"
    return "infra_error" if tr.verdict.status == VerdictStatus.INFRA_ERROR else None


def groups_for_training(groups: Sequence[Sequence[Trajectory]]) -> list[list[Trajectory]]:
    """Scored samples only (infra failures left out); groups left with nothing dropped."""
    out = [[t for t in g if t.reward is not None and t.hops] for g in groups]
    return [g for g in out if g]


# ---------------------------------------------------------------------- stats
class RewardStats(BaseModel):
    """Mean reward over tasks (each task's samples averaged first) and its standard error."""

    model_config = ConfigDict(frozen=True)

    mean: float
    se: float
    tasks: int
    samples: int
    dropped: int
    per_task: dict[str, float] = Field(default_factory=dict)


def reward_stats(groups: Sequence[Sequence[Trajectory]]) -> RewardStats:
    """Tasks are the unit: samples of one task are correlated, tasks are independent draws."""
    per_task: dict[str, float] = {}
    samples = dropped = 0
    for g in groups:
        rewards = [t.reward for t in g if t.reward is not None]
        dropped += len(g) - len(rewards)
        samples += len(rewards)
        if rewards:
            per_task[g[0].task_id] = sum(rewards) / len(rewards)
    values = list(per_task.values())
    n = len(values)
    mean = sum(values) / n if n else 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return RewardStats(mean=mean, se=math.sqrt(var / n) if n else 0.0, tasks=n, samples=samples,
                       dropped=dropped, per_task=per_task)


def paired_se(before: RewardStats, after: RewardStats) -> float:
    """Standard error of the mean per-task difference (after - before) on shared tasks."""
    shared = sorted(set(before.per_task) & set(after.per_task))
    diffs = [after.per_task[k] - before.per_task[k] for k in shared]
    n = len(diffs)
    if n < 2:
        return 0.0
    m = sum(diffs) / n
    return math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1) / n)


def persist(groups: Sequence[Sequence[Trajectory]], folder: Path, name: str) -> Path:
    """One parquet shard of every trajectory (dropped ones included), atomically."""
    rows = [t for g in groups for t in g]
    return write_parquet(rows, Path(folder) / f"{name}.parquet")
