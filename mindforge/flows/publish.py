"""Prefect tasks that publish a stage's trajectories: a table, and a page each for some of them.

The pages are independent, so they fan out as mapped tasks on the flow's task
runner (a thread pool here, Dask or Ray workers on a cluster).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from mindforge.flows import artifacts, trajectories

DETAILED = 24  # pages a stage; every trajectory is in the table and in the dataset anyway


@task(name="publish-trajectory", retries=1)
def publish_trajectory(cycle: int, shard: str, trajectory_json: str) -> str:
    """One trajectory's page; returns the artifact id (the UI opens /artifacts/artifact/<id>)."""
    from prefect.artifacts import create_markdown_artifact

    from mindforge.tasks.models import Trajectory

    tr = Trajectory.model_validate_json(trajectory_json)
    k = trajectories.detail_key(cycle, tr.id)
    artifact_id = create_markdown_artifact(markdown=trajectories.markdown(tr, Path(shard)), key=k,
                                           description=f"trajectory {tr.id} of task {tr.task_id}")
    return str(artifact_id)


def publish_trajectories(cycle: int, stage: str, folder: Path, detailed: int = DETAILED) -> list[dict[str, Any]]:
    """Table ``cycle-N-<stage>-trajectories`` plus mapped detail pages; returns the rows."""
    items = trajectories.read_shards(folder)
    chosen = trajectories.pick_detailed(items, detailed)
    picked = [(str(shard), tr) for shard, tr in items if tr.id in chosen]
    pages: dict[str, str] = {}
    if picked:
        # Pages first: a row links to its page by the artifact id the UI opens.
        futures = publish_trajectory.map(cycle, [s for s, _ in picked], [tr.model_dump_json() for _, tr in picked])
        pages = {tr.id: artifact_id for (_, tr), artifact_id in zip(picked, futures.result(), strict=True)}
    rows = [trajectories.row(shard, tr, pages.get(tr.id)) for shard, tr in items]
    artifacts.table(cycle, f"{stage}-trajectories", rows,
                    f"{stage} trajectories of cycle {cycle}: task, route, reward, verdict, tokens; "
                    f"'detail' opens the full trajectory, 'dataset' is its parquet shard ({folder})")
    return rows
