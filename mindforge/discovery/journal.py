"""The per-candidate journal: a rerun verifies no candidate twice and loses none.

``cycles/N/discovery/journal.jsonl`` gets one line per proposal (what
candidate ``i`` is, so a model proposal is not sampled again) and one per
decision (accepted with its measurements, or rejected with a reason). Each
line is written whole and fsynced before the stage goes on; a torn last line
from a kill is dropped on read, and the decision it would have held is taken
again. Infrastructure failures are never journaled: a rerun retries them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindforge.discovery.proposers.base import Proposal
from mindforge.store import JsonLog
from mindforge.tasks.decisions import Decision


class Journal:
    def __init__(self, path: Path):
        self._log = JsonLog(path)
        self.path = self._log.path
        self.proposals: dict[int, Proposal] = {}
        self.decisions: dict[int, Decision] = {}
        for entry in self._log.read():
            body = {k: v for k, v in entry.items() if k != "type"}
            if entry["type"] == "proposal":
                self.proposals[body["index"]] = Proposal.model_validate(body)
            elif entry["type"] == "decision":
                self.decisions[body["index"]] = Decision.model_validate(body)

    def _append(self, kind: str, record: Any) -> None:
        self._log.append(kind, record)

    def add_proposal(self, p: Proposal) -> None:
        if p.index not in self.proposals:
            self._append("proposal", p)
            self.proposals[p.index] = p

    def add_decision(self, d: Decision) -> None:
        if d.index not in self.decisions:
            self._append("decision", d)
            self.decisions[d.index] = d
