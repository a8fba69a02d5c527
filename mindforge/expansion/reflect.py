"""The reflective proposer: the model reads failing TRAIN trajectories and edits its HCP.

Only train-split trajectories reach the prompt (validation and test never
do), so what reflection learns from is not what the gate measures. The
model's reply is parsed strictly: one JSON object with a ``patch`` array of
operation objects and a ``reason`` (or ``hypothesis``) string. Anything else
(prose, a truncated object, a patch that is not a list) is a *malformed*
proposal: recorded with the raw text, never evaluated, never a crash. A
135M model produces mostly that; the numeric and structural operators keep
the search moving meanwhile.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, runtime_checkable

from mindforge.expansion.proposers import Proposal, ProposalContext, TrainView
from mindforge.hcp import HCP

_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)
_PROMPT_CHARS = 5000
_FIELD_CHARS = 280


@runtime_checkable
class Reflector(Protocol):
    """Runs the ``reflect`` role of ``hcp`` on ``prompt``; returns the model's text."""

    def reflect(self, hcp: HCP, prompt: str, seed: int) -> str: ...


def _clip(text: str, n: int = _FIELD_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def editable_view(hcp: HCP) -> dict[str, Any]:
    """The parts of the document reflection may edit, with their JSON pointers' roots."""
    doc = hcp.to_document()
    return {
        "/system": doc["system"],
        "/agents_md": doc["agents_md"],
        "/skills": [{k: s[k] for k in ("name", "enabled", "routes", "description")} for s in doc["skills"]],
        "/hooks": doc["hooks"],
        "/provider/sampling/answer": doc["provider"]["sampling"]["answer"],
        "/limits": doc["limits"],
    }


def reflection_prompt(hcp: HCP, view: TrainView, examples: int) -> str:
    by_id = {t.id: t for t in view.tasks}
    answers = {tr.id: tr for tr in view.trajectories}
    lines = [hcp.prompts.reflect, "", "Current settings (JSON pointer: value):",
             json.dumps(editable_view(hcp), ensure_ascii=False), "",
             f"Failure counts by route and class: {json.dumps(view.audit.counts)}", "", "Failures:"]
    for item in view.audit.items[:examples]:
        task, tr = by_id.get(item.task_id), answers.get(item.trajectory_id)
        lines += [
            f"- task ({item.family}): {_clip(task.prompt if task else '?')}",
            f"  routed to: {item.route}; class: {item.cls}; evidence: {item.evidence}",
            f"  answer: {_clip(tr.answer if tr else '')}",
        ]
    text = "\n".join(lines)
    return text if len(text) <= _PROMPT_CHARS else text[: _PROMPT_CHARS - 3] + "..."


def _json_object(text: str) -> Any:
    stripped = text.strip()
    candidates = [stripped]
    candidates += [m.group(1) for m in _FENCE.finditer(text)]
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{") : text.rindex("}") + 1])
    for c in candidates:
        try:
            return json.loads(c)
        except ValueError:
            continue
    raise ValueError("no JSON object found in the reply")


def parse_reflection(text: str) -> tuple[list[dict[str, Any]] | None, str, str | None]:
    """(operations, hypothesis, why malformed) from the model's reply."""
    try:
        obj = _json_object(text)
    except ValueError as exc:
        return None, "", str(exc)
    if not isinstance(obj, dict):
        return None, "", f"expected a JSON object, got {type(obj).__name__}"
    hypothesis = obj.get("reason", obj.get("hypothesis"))
    patch = obj.get("patch")
    if not isinstance(hypothesis, str) or not hypothesis.strip():
        return None, "", "missing a 'reason' string"
    if not isinstance(patch, list) or not patch or not all(isinstance(op, dict) for op in patch):
        return None, hypothesis, "'patch' must be a non-empty array of operation objects"
    return patch, hypothesis.strip(), None


class ReflectiveProposer:
    name = "reflect"

    def __init__(self, reflector: Reflector, examples: int = 3):
        self.reflector, self.examples = reflector, examples

    def propose(self, ctx: ProposalContext) -> Proposal | None:
        view = ctx.train()
        if not view.audit.items:
            return None  # nothing failed on train: nothing to reflect on
        prompt = reflection_prompt(ctx.incumbent, view, self.examples)
        try:
            text = self.reflector.reflect(ctx.incumbent, prompt, seed=ctx.seed * 100003 + ctx.index)
        except Exception as exc:  # noqa: BLE001 - an engine failure is a lost proposal, not a lost run
            return Proposal(proposer=self.name, ops=None, malformed=f"reflect call failed: {exc}")
        ops, hypothesis, why = parse_reflection(text)
        return Proposal(proposer=self.name, ops=ops if ops is not None else None, hypothesis=hypothesis,
                        malformed=why, raw=text[:2000])
