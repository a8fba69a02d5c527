"""Proposers: where candidate edits come from.

A proposer returns a ``Proposal`` (RFC 6902 operations and a hypothesis) for
the current incumbent, or ``None`` when it has nothing left to try. Proposals
are untrusted: the stage's ``PatchPolicy`` checks each one before anything is
spent on it, and a proposal that could not even be parsed is kept as
``malformed`` (recorded, never evaluated).

Proposers must be deterministic in ``ProposalContext.index`` and the seed, so
that a resumed run proposes what the killed run would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from mindforge.expansion.audit import AuditReport
from mindforge.hcp import HCP
from mindforge.tasks.models import Task, Trajectory


class Proposal(BaseModel):
    model_config = ConfigDict(frozen=True)

    proposer: str
    ops: Any  # a list of operation objects when well formed
    hypothesis: str = ""
    malformed: str | None = None  # why it could not be parsed (then ``ops`` is whatever came)
    raw: str = ""  # the model's text, for reflective proposals


@dataclass(frozen=True)
class TrainView:
    """What reflection may see: the incumbent's TRAIN trajectories and their audit."""

    tasks: Sequence[Task]
    trajectories: Sequence[Trajectory]
    audit: AuditReport


@dataclass(frozen=True)
class ProposalContext:
    index: int
    seed: int
    incumbent: HCP
    train: Callable[[], TrainView]  # lazy: solving the train split costs rollouts
    refused: Callable[[Sequence[dict[str, Any]]], bool]  # would the policy refuse it (tried, invalid)?

    @property
    def document(self) -> dict[str, Any]:
        return self.incumbent.to_document()


@runtime_checkable
class Proposer(Protocol):
    name: str

    def propose(self, ctx: ProposalContext) -> Proposal | None: ...


class ScriptedProposer:
    """Proposes the given patches in order, then nothing (tests, or edits from a file)."""

    name = "scripted"

    def __init__(self, patches: Sequence[tuple[Any, str]]):
        self.patches = list(patches)

    def propose(self, ctx: ProposalContext) -> Proposal | None:
        if ctx.index >= len(self.patches):
            return None
        ops, hypothesis = self.patches[ctx.index]
        return Proposal(proposer=self.name, ops=ops, hypothesis=hypothesis)


class RoundRobin:
    """Takes turns between proposers; one that has nothing left is skipped."""

    name = "round-robin"

    def __init__(self, proposers: Sequence[Proposer]):
        if not proposers:
            raise ValueError("at least one proposer is needed")
        self.proposers = list(proposers)

    def propose(self, ctx: ProposalContext) -> Proposal | None:
        k = len(self.proposers)
        for shift in range(k):
            p = self.proposers[(ctx.index + shift) % k]
            got = p.propose(ctx)
            if got is not None:
                return got
        return None
