"""The stage's output: the accepted dataset, the rejection table, the summary, DONE.json.

Accepted tasks keep their content (so their ids are unchanged) and gain
provenance: parents, proposer, cycle, HCP version, and in ``extra`` the
solve rate, its interval, learnability and the verification log.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.journal import Journal
from mindforge.discovery.records import DiscoveryResult
from mindforge.store import RunDir, read_parquet, write_parquet
from mindforge.tasks.decisions import Decision
from mindforge.tasks.models import Provenance, Task


def accepted_task(d: Decision, config: DiscoveryConfig, hcp_version: str | None) -> Task:
    task = Task.model_validate(d.task)
    extra = {"solve_rate": d.solve_rate, "interval": list(d.interval) if d.interval else None,
             "passes": d.passes, "attempts": d.attempts, "learnability": d.learnability,
             "band": list(config.band), "confidence": config.confidence, "verification_log": list(d.log),
             "candidate_index": d.index}
    prov = Provenance(source="discovery", parents=d.parents, cycle=config.cycle, proposer=d.proposer,
                      hcp_version=hcp_version, extra=extra)
    return task.model_copy(update={"provenance": prov})


def rows(decisions: list[Decision]) -> tuple[list[dict], list[dict]]:
    acc = [{"id": d.task_id, "family": d.family, "proposer": d.proposer, "parent": ", ".join(d.parents),
            "solve_rate": d.solve_rate, "interval": json.dumps(d.interval), "learnability": d.learnability}
           for d in decisions if d.accepted]
    rej = [{"index": d.index, "proposer": d.proposer, "family": d.family, "reason": d.reason,
            "detail": d.detail[:300]} for d in decisions if not d.accepted]
    return acc, rej


def finish(config: DiscoveryConfig, journal: Journal, seconds: float, hcp_version: str | None,
           infra_pending: int = 0) -> DiscoveryResult:
    """Write the dataset and the rejection table from the journal; DONE.json only when nothing is pending."""
    folder = RunDir(config.run_dir).stage(config.cycle, "discovery")
    decisions = [journal.decisions[i] for i in sorted(journal.decisions) if i < config.budget]
    accepted = [accepted_task(d, config, hcp_version) for d in decisions if d.accepted]
    dataset = folder / "tasks" / "accepted.parquet"
    if accepted:
        write_parquet(accepted, dataset)
    else:
        dataset.unlink(missing_ok=True)
    rejected_path = folder / "rejected.parquet"
    rejects = [d for d in decisions if not d.accepted]
    if rejects:
        write_parquet(rejects, rejected_path)
    reasons = Counter(d.reason for d in rejects)
    if infra_pending:
        reasons["infra_error"] += infra_pending
    by_proposer: dict[str, dict[str, int]] = {}
    by_generator: dict[str, dict[str, int]] = {}
    for d in decisions:
        p = journal.proposals.get(d.index)
        keys = [(by_proposer, d.proposer)]
        if p is not None and p.variant is not None:
            keys.append((by_generator, f"{d.proposer.removeprefix('procedural/')}/{p.variant}"))
        for table, key in keys:
            slot = table.setdefault(key, {"candidates": 0, "accepted": 0})
            slot["candidates"] += 1
            slot["accepted"] += int(d.accepted)
    acc_rows, rej_rows = rows(decisions)
    result = DiscoveryResult(
        cycle=config.cycle, accepted=len(accepted), by_family=dict(sorted(Counter(t.family for t in accepted).items())),
        rejected=dict(sorted(reasons.items())), dataset=str(dataset.parent), rejected_path=str(rejected_path),
        candidates=len(decisions) + infra_pending, by_proposer=by_proposer,
        by_generator=dict(sorted(by_generator.items(), key=lambda kv: (-kv[1]["accepted"], kv[0]))),
        acceptance_rate=round(len(accepted) / max(1, len(decisions) + infra_pending), 4),
        tasks_per_minute=round(len(accepted) / max(seconds / 60, 1e-9), 3), seconds=round(seconds, 2),
        hcp_version=hcp_version, accepted_rows=acc_rows, rejection_rows=rej_rows,
    )
    if not infra_pending and len(decisions) >= config.budget:
        RunDir(config.run_dir).mark_done(config.cycle, "discovery", result.model_dump(mode="json"))
    return result


def finished_result(config: DiscoveryConfig) -> DiscoveryResult | None:
    marker = RunDir(config.run_dir).done_marker(config.cycle, "discovery")
    if not marker.is_file():
        return None
    return DiscoveryResult.model_validate_json(marker.read_text(encoding="utf-8"))


def accepted_tasks(config: DiscoveryConfig) -> list[Task]:
    folder = RunDir(config.run_dir).stage(config.cycle, "discovery") / "tasks"
    return read_parquet(Path(folder), Task) if folder.is_dir() else []
