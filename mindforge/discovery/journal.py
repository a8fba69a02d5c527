"""The per-candidate journal: a rerun verifies no candidate twice and loses none.

``cycles/N/discovery/journal.jsonl`` gets one line per proposal (what
candidate ``i`` is, so a model proposal is not sampled again) and one per
decision (accepted with its measurements, or rejected with a reason). Each
line is written whole and fsynced before the stage goes on; a torn last line
from a kill is dropped on read, and the decision it would have held is taken
again. Infrastructure failures are never journaled: a rerun retries them.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from mindforge.discovery.proposers.base import Proposal
from mindforge.discovery.records import Decision


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.proposals: dict[int, Proposal] = {}
        self.decisions: dict[int, Decision] = {}
        for entry in self._read():
            body = {k: v for k, v in entry.items() if k != "type"}
            if entry["type"] == "proposal":
                self.proposals[body["index"]] = Proposal.model_validate(body)
            elif entry["type"] == "decision":
                self.decisions[body["index"]] = Decision.model_validate(body)

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        entries, good = [], 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                entries.append(json.loads(line))
            except ValueError:
                break
            good += len(line)
        if good != len(raw):
            with self.path.open("r+b") as fh:  # drop a torn tail so appends start on a fresh line
                fh.truncate(good)
        return entries

    def _append(self, kind: str, record: Any) -> None:
        line = json.dumps({"type": kind, **record.model_dump(mode="json")}, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(line.encode())
                fh.flush()
                os.fsync(fh.fileno())

    def add_proposal(self, p: Proposal) -> None:
        if p.index not in self.proposals:
            self._append("proposal", p)
            self.proposals[p.index] = p

    def add_decision(self, d: Decision) -> None:
        if d.index not in self.decisions:
            self._append("decision", d)
            self.decisions[d.index] = d
