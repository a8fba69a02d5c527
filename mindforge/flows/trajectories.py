"""Trajectories for the Prefect UI: one table row each, and a markdown page for the ones shown in full.

A row's ``detail`` is the UI path of that trajectory's markdown artifact
(``/artifacts/artifact/<id>``, the page that renders it; its key is
``cycle-N-trajectory-<trajectory id>``) when it has one, and ``dataset``
is the parquet shard that holds every trajectory of the stage, so each row
leads to the full record either way. Plain functions over plain data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mindforge.flows.artifacts import key

MAX_TEXT = 4000


def detail_key(cycle: int, trajectory_id: str) -> str:
    return key(cycle, f"trajectory-{trajectory_id}")


def ui_path(artifact_id: str) -> str:
    return f"/artifacts/artifact/{artifact_id}"


def read_shards(folder: Path) -> list[tuple[Path, Any]]:
    """(shard, trajectory) for every trajectory in a stage's ``trajectories/`` folder."""
    from mindforge.store import read_parquet
    from mindforge.tasks.models import Trajectory

    out = []
    for shard in sorted(Path(folder).glob("*.parquet")):
        out += [(shard, tr) for tr in read_parquet(shard, Trajectory)]
    return out


def row(shard: Path, tr: Any, artifact_id: str | None) -> dict[str, Any]:
    return {
        "trajectory": tr.id,
        "task": tr.task_id,
        "route": tr.route,
        "hcp": tr.hcp_version,
        "sample": tr.sample,
        "reward": tr.reward,
        "verdict": tr.verdict.status.value if tr.verdict else "none",
        "tokens": sum(len(h.completion_ids) for h in tr.hops),
        "hops": len(tr.hops),
        "set": shard.stem,
        "detail": ui_path(artifact_id) if artifact_id else "-",
        "dataset": str(shard),
    }


def pick_detailed(items: Sequence[tuple[Path, Any]], limit: int) -> set[str]:
    """Which trajectories get a page: failures first (what a reviewer opens), then the rest, by id."""
    ranked = sorted(items, key=lambda it: ((it[1].reward or 0.0) > 0.5, it[1].id))
    return {tr.id for _, tr in ranked[:limit]}


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT} more characters)"


def markdown(tr: Any, shard: Path) -> str:
    """The whole trajectory: verdict, every hop's text and token counts, tool calls, the answer."""
    v = tr.verdict
    lines = [f"# Trajectory {tr.id}", "",
             (f"task `{tr.task_id}` · route **{tr.route}** · HCP `{tr.hcp_version}` · sample {tr.sample} · "
             f"seed {tr.seed} · reward **{tr.reward}** · verdict **{v.status.value if v else 'none'}**"), "",
             f"Dataset: `{shard}` (row with id `{tr.id}`)", ""]
    if v and v.tests:
        lines += ["| test | outcome | message |", "|---|---|---|"]
        lines += [f"| {t.name} | {t.outcome.value} | {t.message[:200].replace('|', '/').replace(chr(10), ' ')} |"
                  for t in v.tests]
        lines.append("")
    for i, hop in enumerate(tr.hops):
        lines += [f"## Hop {i}: {hop.kind} on {hop.route} (`{hop.adapter}`)", "",
                  (f"{len(hop.prompt_ids)} prompt tokens, {len(hop.completion_ids)} completion tokens, "
                  f"finish {hop.finish_reason}, {hop.duration_s:.2f}s"), "", "```text", _clip(hop.text), "```", ""]
    if tr.transcript:
        lines += ["## Tool calls", "", "```json", _clip(json.dumps(list(tr.transcript), indent=2)), "```", ""]
    lines += ["## Answer", "", "```text", _clip(tr.answer), "```"]
    return "\n".join(lines) + "\n"
