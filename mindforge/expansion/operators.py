"""Numeric and structural edit operators over what the HCP declares tunable.

``NumericProposer`` moves one value of ``/tunable`` inside its declared range
(doubling or halving a count, a quarter-range step of a float, the range's
ends). ``StructuralProposer`` toggles one skill. Both order their moves by
what the train audit suggests (answers cut at ``max_tokens`` push the token
limit up; format and wrong-answer failures under a non-zero temperature push
it down; tool misuse raises the tool-turn limit), break ties with a seeded
shuffle, and skip moves the policy would refuse (already tried, invalid), so they propose something new until
their space is spent (then ``None``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from mindforge.expansion.proposers import Proposal, ProposalContext, TrainView
from mindforge.hcp import TunableRange

Move = tuple[float, float, list[dict[str, Any]], str]  # (priority, tiebreak, ops, hypothesis)


def _resolve(doc: dict[str, Any], pointer: str) -> Any:
    node: Any = doc
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _values(t: TunableRange, v: float) -> list[float]:
    lo, hi = t.min, t.max
    if t.integer:
        raw = [v * 2, max(v // 2, lo), lo, hi, v + max(1, (hi - lo) // 8), v - max(1, (hi - lo) // 8)]
        out = [int(min(max(x, lo), hi)) for x in raw]
    else:
        step = (hi - lo) / 4
        out = [round(min(max(x, lo), hi), 4) for x in (v - step, v + step, lo, hi)]
    return sorted({x for x in out if x != v}, key=lambda x: abs(x - v))


class _Signals:
    """Counts from the train audit that steer the order of moves."""

    def __init__(self, view: TrainView | None):
        self.truncated = self.format_like = self.tool = self.failed = 0
        if view is None:
            return
        cut = {tr.id for tr in view.trajectories
               if any(h.kind == "answer" and h.finish_reason == "length" for h in tr.hops)}
        for item in view.audit.items:
            self.failed += 1
            self.truncated += item.trajectory_id in cut
            self.format_like += item.cls in ("format_error", "wrong_answer", "empty_answer")
            self.tool += item.cls == "tool_misuse"


def _priority(path: str, old: float, new: float, s: _Signals) -> tuple[float, str]:
    up = new > old
    if path.endswith("/max_tokens") and s.truncated:
        why = f"{s.truncated} of {s.failed} failing train answers were cut at max_tokens"
        return (2.0 if up else -1.0), why
    if path.endswith("/temperature") and s.format_like and old > 0:
        why = f"{s.format_like} of {s.failed} train failures are format or wrong answers at temperature {old}"
        return (1.5 if not up else -1.0), why
    if path.endswith("/max_tool_turns") and s.tool:
        return (1.0 if up else -1.0), f"{s.tool} train failures misuse tools"
    return 0.0, "explore the declared range"


class NumericProposer:
    name = "numeric"

    def __init__(self, use_audit: bool = True):
        self.use_audit = use_audit

    def moves(self, ctx: ProposalContext) -> list[Move]:
        doc = ctx.document
        signals = _Signals(ctx.train() if self.use_audit else None)
        rng = random.Random(f"{ctx.seed}|numeric|{ctx.incumbent.name}")
        out: list[Move] = []
        for t in ctx.incumbent.tunable:
            old = _resolve(doc, t.path)
            for new in _values(t, old):
                prio, why = _priority(t.path, old, new, signals)
                ops = [{"op": "replace", "path": t.path, "value": new}]
                out.append((prio, rng.random(), ops, f"{t.path}: {old} -> {new} ({why})"))
        return out

    def propose(self, ctx: ProposalContext) -> Proposal | None:
        return _first_untried(self.name, self.moves(ctx), ctx)


class StructuralProposer:
    """Skill toggles; skills whose routes fail on train come first."""

    name = "structural"

    def __init__(self, use_audit: bool = True):
        self.use_audit = use_audit

    def propose(self, ctx: ProposalContext) -> Proposal | None:
        view = ctx.train() if self.use_audit else None
        failing = {i.family for i in view.audit.items} if view else set()
        rng = random.Random(f"{ctx.seed}|structural")
        moves: list[Move] = []
        for i, skill in enumerate(ctx.incumbent.skills):
            routes = set(skill.routes) or {"L0", "L1", "L2", "L3"}
            touched = sorted(routes & failing)
            verb = "disable" if skill.enabled else "enable"
            why = f"failures on {', '.join(touched)}" if touched else "no train failure on its routes"
            ops = [{"op": "replace", "path": f"/skills/{i}/enabled", "value": not skill.enabled}]
            moves.append((float(len(touched)), rng.random(), ops, f"{verb} skill {skill.name!r} ({why})"))
        return _first_untried(self.name, moves, ctx)


def _first_untried(name: str, moves: Sequence[Move], ctx: ProposalContext) -> Proposal | None:
    for _, _, ops, why in sorted(moves, key=lambda m: (-m[0], m[1])):
        if not ctx.refused(ops):
            return Proposal(proposer=name, ops=ops, hypothesis=why)
    return None
