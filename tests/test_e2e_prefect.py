"""End to end: `prefect deployment run 'rsi-cycle/embedded'` on a real server, worker and stages.

The run completes, and its trajectory table, HCP diff and cycle summary are
read back through the Prefect API and checked for content.
"""

from __future__ import annotations

import json

import pytest
from e2e_cycle import deployed_run, stop

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.model]


@pytest.fixture(scope="session")
def cycle_run(tmp_path_factory):
    try:
        yield deployed_run(tmp_path_factory.mktemp("e2e-cycle"))
    finally:
        stop()


def test_the_deployment_run_completes(cycle_run) -> None:
    state = cycle_run.api("GET", f"/flow_runs/{cycle_run.flow_run_id}")["state"]
    assert state["type"] == "COMPLETED", f"{state}\n{cycle_run.output[-4000:]}"
    summary = json.loads((cycle_run.run_dir / "cycles/1/summary.json").read_text())
    assert {s["status"] for s in summary["stages"].values()} == {"ran"}
    print(f"rsi-cycle/embedded: {cycle_run.seconds:.0f}s wall")


def test_artifacts_read_back_through_the_api(cycle_run) -> None:
    found = cycle_run.artifacts(["cycle-1-expansion-trajectories", "cycle-1-hcp-diff", "cycle-1-summary",
                                 "cycle-1-update-summary"])
    assert set(found) == {"cycle-1-expansion-trajectories", "cycle-1-hcp-diff", "cycle-1-summary",
                          "cycle-1-update-summary"}
    assert all(a["flow_run_id"] for a in found.values())
    rows = found["cycle-1-expansion-trajectories"]["data"]
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert rows and {"trajectory", "task", "route", "reward", "verdict", "tokens", "detail", "dataset"} <= set(rows[0])
    assert all(r["verdict"] in ("pass", "fail", "infra_error", "none") for r in rows)
    detailed = [r for r in rows if r["detail"] != "-"]
    page_key = f"cycle-1-trajectory-{detailed[0]['trajectory']}"
    page = cycle_run.artifacts([page_key])[page_key]["data"]
    assert detailed[0]["detail"].endswith(cycle_run.artifacts([page_key])[page_key]["id"])
    assert detailed[0]["trajectory"] in page and "## Hop" in page
    diff = found["cycle-1-hcp-diff"]["data"]
    assert "# HCP change in cycle 1" in diff and ("```diff" in diff or "No change" in diff)
    summary = found["cycle-1-summary"]["data"]
    for fact in ("tasks accepted", "HCP start → best → after", "adapter", "validation before → after"):
        assert fact in summary
