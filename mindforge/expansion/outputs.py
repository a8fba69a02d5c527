"""What the stage leaves behind, written atomically under ``cycles/N/expansion/``::

    hcp/<hash>.hcp.json   the start, every accepted candidate, the best
    diff.md, diff.patch   best against start (markdown with a diff block; unified)
    lineage.json          every proposal: parent, patch, hypothesis, scores ± SE, decision
    lineage.parquet       the same as a dataset
    audit.json            failure classes of start and best, per route and class, with evidence
    trajectories/         every solve, one parquet shard each (a ``datasets`` folder)
    journal.jsonl         the decisions in order (what a resumed run replays)
    DONE.json             the ExpansionResult (written last by the stage)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mindforge.expansion.audit import AuditReport
from mindforge.expansion.records import CandidateRecord, ScoreRecord, TestReport, finite
from mindforge.expansion.scores import TaskScores, compare
from mindforge.hcp import HCP, HCPDiff, diff_documents, hcp_hash, pretty_json
from mindforge.store import atomic_write_json, atomic_write_text, write_parquet
from mindforge.tasks.models import Trajectory

MAX_TRAJECTORY_ROWS = 500


def write_hcp(folder: Path, hcp: HCP) -> Path:
    path = Path(folder) / f"{hcp_hash(hcp)}.hcp.json"
    if not path.exists():
        atomic_write_text(path, pretty_json(hcp.to_document()))
    return path


def report(candidate: TaskScores, start: TaskScores) -> TestReport:
    cmp = compare(candidate, start)
    return TestReport(start=ScoreRecord.of(cmp.incumbent), best=ScoreRecord.of(cmp.candidate),
                      gain=cmp.gain, se=finite(cmp.se))


def write_diff(folder: Path, start: HCP, best: HCP) -> HCPDiff:
    diff = diff_documents(start.to_document(), best.to_document(),
                          f"{hcp_hash(start)}.hcp.json", f"{hcp_hash(best)}.hcp.json")
    atomic_write_text(Path(folder) / "diff.md", diff.markdown() + "\n")
    atomic_write_text(Path(folder) / "diff.patch", diff.unified)
    return diff


def write_lineage(folder: Path, records: Sequence[CandidateRecord]) -> None:
    atomic_write_json(Path(folder) / "lineage.json", [r.model_dump(mode="json") for r in records])
    if records:
        write_parquet(list(records), Path(folder) / "lineage.parquet")


def write_audit(folder: Path, reports: dict[str, AuditReport]) -> list[dict[str, Any]]:
    atomic_write_json(Path(folder) / "audit.json", {k: r.model_dump(mode="json") for k, r in reports.items()})
    return [{"hcp": k, **row} for k, r in reports.items() for row in r.rows()]


def trajectory_rows(labelled: Sequence[tuple[str, str, Trajectory]], reports: dict[str, AuditReport],
                    families: dict[str, str]) -> list[dict[str, Any]]:
    """(hcp label, split, trajectory) -> rows: task, route, reward, verdict, tokens, failure class."""
    classes = {i.trajectory_id: i.cls for r in reports.values() for i in r.items}
    rows = []
    for label, split, tr in labelled[:MAX_TRAJECTORY_ROWS]:
        rows.append({
            "hcp": label,
            "split": split,
            "task": tr.task_id,
            "family": families.get(tr.task_id, "?"),
            "route": tr.route,
            "sample": tr.sample,
            "reward": tr.reward,
            "verdict": tr.verdict.status.value if tr.verdict else "none",
            "tokens": sum(len(h.completion_ids) for h in tr.hops),
            "class": classes.get(tr.id, "-"),
        })
    return rows
