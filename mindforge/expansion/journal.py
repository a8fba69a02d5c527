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

import json
import os
from pathlib import Path
from typing import Any

from mindforge.expansion.records import BaselineRecord, CandidateRecord, SolveRecord


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries: list[dict[str, Any]] = self._read()

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
            with self.path.open("r+b") as fh:  # drop a torn tail so appends start on a line
                fh.truncate(good)
        return entries

    def append(self, kind: str, record: Any) -> None:
        entry = {"type": kind, **record.model_dump(mode="json")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as fh:
            fh.write((json.dumps(entry, sort_keys=True) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        self.entries.append(entry)

    def candidates(self) -> list[CandidateRecord]:
        return [CandidateRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "candidate"]

    def solves(self) -> list[SolveRecord]:
        return [SolveRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "solve"]

    def baselines(self) -> list[BaselineRecord]:
        return [BaselineRecord.model_validate(_body(e)) for e in self.entries if e["type"] == "baseline"]


def _body(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "type"}
