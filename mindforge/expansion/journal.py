"""The stage's journal: what was decided, appended one line at a time.

A resumed run replays the journal and continues after its last line, so a
candidate whose decision is in the journal is never evaluated again. Each
line is written whole and fsynced before the stage goes on; a process killed
mid-write leaves at most one torn last line, which ``Journal`` drops (the
decision it would have recorded is simply taken again, from trajectories
already on disk).

Line types: ``baseline`` (the incumbent's validation score and noise floor;
one per incumbent), ``solve`` (rollouts spent on a train view or the test) and
``candidate`` (a ``CandidateRecord``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindforge.expansion.records import BaselineRecord, CandidateRecord, SolveRecord
from mindforge.store import JsonLog


class Journal:
    def __init__(self, path: Path):
        self._log = JsonLog(path)
        self.path = self._log.path
        self.entries: list[dict[str, Any]] = self._log.read()

    def append(self, kind: str, record: Any) -> None:
        self.entries.append(self._log.append(kind, record))

    def candidates(self) -> list[CandidateRecord]:
        return [CandidateRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "candidate"]

    def solves(self) -> list[SolveRecord]:
        return [SolveRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "solve"]

    def baselines(self) -> list[BaselineRecord]:
        return [BaselineRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "baseline"]


def _body(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "type"}
