"""Audit: why did a trajectory fail? One class a failure, with its evidence.

Classes, in the order they are tested (the first that applies wins, because
an earlier cause explains the later symptoms: a wrong route explains a badly
formatted answer, an infrastructure error explains everything):

``infra_error``   no verdict, or the sandbox could not judge (not the HCP's fault)
``wrong_route``   the router chose a route other than the task's family
``empty_answer``  nothing to check: blank answer and no tool calls
``tool_misuse``   a tool task with no call, an unknown tool, or arguments that failed
``format_error``  the answer could not be parsed (no code block, bad JSON transcript,
                  code that does not load)
``timeout``       a checker test or the job ran out of time
``wrong_answer``  it ran and a check failed

The evidence is short text a person (and the reflective proposer) can act on:
the failing test and its message, the finish reason when the answer was cut at
``max_tokens``, the route taken.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from mindforge.tasks.models import Task, TestOutcome, Trajectory, VerdictStatus

FailureClass = Literal[
    "infra_error", "wrong_route", "empty_answer", "tool_misuse", "format_error", "timeout", "wrong_answer"
]
FAILURE_CLASSES: tuple[str, ...] = (
    "infra_error", "wrong_route", "empty_answer", "tool_misuse", "format_error", "timeout", "wrong_answer",
)
_LOAD_FAILURES = ("candidate failed to load", "not a JSON transcript", "candidate must be", "SyntaxError")
_EVIDENCE_CHARS = 300


class AuditItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    trajectory_id: str
    task_id: str
    family: str
    route: str
    cls: FailureClass
    evidence: str


class AuditReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    hcp_version: str
    items: tuple[AuditItem, ...]
    counts: dict[str, dict[str, int]]  # family -> class -> failures
    passed: int
    failed: int

    def rows(self) -> list[dict[str, object]]:
        """One row per (family, class), for tables."""
        return [{"route": r, "class": c, "failures": n}
                for r, by in sorted(self.counts.items()) for c, n in sorted(by.items())]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EVIDENCE_CHARS else text[: _EVIDENCE_CHARS - 3] + "..."


def _truncation(tr: Trajectory) -> str:
    answers = [h for h in tr.hops if h.kind == "answer"]
    if answers and answers[-1].finish_reason == "length":
        return f" (answer cut at max_tokens after {len(answers[-1].completion_ids)} tokens)"
    return ""


def _tool_problem(task: Task, tr: Trajectory) -> str | None:
    if task.output_kind != "tool_calls":
        return None
    if not tr.transcript:
        return "no tool was called"
    known = {t.name for t in task.tools}
    for call in tr.transcript:
        name = call.get("name")
        if name not in known:
            return f"called unknown tool {name!r} (known: {', '.join(sorted(known))})"
        result = call.get("result")
        if isinstance(result, dict) and "error" in result:
            return f"tool {name!r} answered an error: {_short(str(result['error']))}"
    return None


def _failed_tests(tr: Trajectory) -> list[tuple[str, TestOutcome, str]]:
    tests = tr.verdict.tests if tr.verdict else ()
    return [(t.name, t.outcome, t.message) for t in tests if t.outcome != TestOutcome.PASS]


def classify(task: Task, tr: Trajectory) -> tuple[FailureClass, str] | None:
    """The failure class and evidence of one trajectory; None when it passed."""
    v = tr.verdict
    if v is None or v.status == VerdictStatus.INFRA_ERROR:
        return "infra_error", _short(v.log if v else "no verdict")
    if v.status == VerdictStatus.PASS and (tr.reward is None or tr.reward >= 1.0):
        return None
    if tr.route != task.family:
        return "wrong_route", f"routed to {tr.route}, task family is {task.family}"
    if not tr.answer.strip() and not tr.transcript:
        return "empty_answer", "blank answer" + _truncation(tr)
    if (problem := _tool_problem(task, tr)) is not None:
        return "tool_misuse", problem
    failed = _failed_tests(tr)
    fmt = str(tr.meta.get("format_problem") or "")
    load = next((m for _, _, m in failed if any(s in m for s in _LOAD_FAILURES)), "")
    if fmt or load:
        return "format_error", _short(fmt or load) + _truncation(tr)
    timed = [n for n, o, _ in failed if o == TestOutcome.TIMEOUT]
    if timed:
        return "timeout", f"timed out: {', '.join(timed[:3])}"
    if failed:
        name, outcome, msg = failed[0]
        more = f" (+{len(failed) - 1} more failing)" if len(failed) > 1 else ""
        return "wrong_answer", _short(f"{name} {outcome.value}: {msg or 'assertion failed'}{more}") + _truncation(tr)
    return "wrong_answer", f"partial credit {tr.reward}" + _truncation(tr)


def audit(tasks: Sequence[Task], trajectories: Sequence[Trajectory], hcp_version: str) -> AuditReport:
    by_id = {t.id: t for t in tasks}
    items: list[AuditItem] = []
    counts: dict[str, Counter[str]] = {}
    passed = 0
    for tr in trajectories:
        task = by_id.get(tr.task_id)
        if task is None:
            continue
        found = classify(task, tr)
        if found is None:
            passed += 1
            continue
        cls, evidence = found
        items.append(AuditItem(trajectory_id=tr.id, task_id=task.id, family=task.family, route=tr.route,
                               cls=cls, evidence=evidence))
        counts.setdefault(task.family, Counter())[cls] += 1
    return AuditReport(hcp_version=hcp_version, items=tuple(items),
                       counts={r: dict(c) for r, c in sorted(counts.items())}, passed=passed,
                       failed=len(items))
