"""The Discovery flow under a Prefect test server: mapped judge tasks, artifacts, stored result reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from mindforge.discovery.config import DiscoveryConfig
from mindforge.flows.discovery import discovery_flow, summary_markdown

pytestmark = [pytest.mark.docker]


def artifacts_by_key(keys: list[str]) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    return {a.key: a for a in found}


def test_flow_publishes_accepted_rejections_and_summary(tmp_path: Path) -> None:
    # one duplicate-prone family and a small budget: some accepted, and an empty rejection table still published
    config = DiscoveryConfig(run_dir=tmp_path, cycle=3, budget=6, measure_difficulty=False,
                             proposers=("procedural",), mbpp_dir=None)
    with prefect_test_harness(server_startup_timeout=180):
        result = discovery_flow(config)
        assert result["accepted"] + sum(result["rejected"].values()) == 6
        found = artifacts_by_key(["cycle-3-discovery-accepted", "cycle-3-discovery-rejections",
                                  "cycle-3-discovery-summary"])
        assert set(found) == {"cycle-3-discovery-accepted", "cycle-3-discovery-rejections",
                              "cycle-3-discovery-summary"}
        assert "Discovery, cycle 3" in found["cycle-3-discovery-summary"].data
        again = discovery_flow(config)  # finished before: read back, not judged again
        assert again == result
    assert "accepted tasks per minute" in summary_markdown(result)
