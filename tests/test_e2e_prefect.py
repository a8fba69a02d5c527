"""End to end: `prefect deployment run 'rsi-cycle/embedded'` on a real server, worker and stages.

The run completes, and its trajectory table, HCP diff and cycle summary are
read back through the Prefect API and checked for content.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.model]




@pytest.mark.timeout(3600)  # one real cycle on the CPU; the session fixture runs inside the first test
def test_the_deployment_run_completes(cycle_run) -> None:
    state = cycle_run.api("GET", f"/flow_runs/{cycle_run.flow_run_id}")["state"]
    assert state["type"] == "COMPLETED", f"{state}\n{cycle_run.output[-4000:]}"
    summary = json.loads((cycle_run.run_dir / "cycles/1/summary.json").read_text())
    assert {s["status"] for s in summary["stages"].values()} == {"ran"}
    # What the embedded engine generated during each stage, from its own counters. Discovery's six
    # candidates here are all procedural (the model proposes one slot in ten) and no solve rate is
    # measured, so it generates nothing: the counters are attributed to the stage that used them.
    generated = {name: s["generation"]["generated_tokens"] for name, s in summary["stages"].items()}
    assert generated.pop("discovery") == 0 and all(n > 0 for n in generated.values()), summary["stages"]
    # The cycle ends with the sealed eval, paired with the cycle-0 baseline on the same 16 tasks.
    ev = summary["eval"]
    assert ev["bench"] == "mbpp" and ev["n"] == 16 and "16 of 427" in ev["subset"]
    assert ev["vs_cycle0"]["n"] == 16 and {"diff", "paired_se", "mcnemar_p"} <= set(ev["vs_cycle0"])
    # Update's phases ran on the real engine: routing measured per family, rejection sampling reported.
    update = json.loads((cycle_run.run_dir / "cycles/1/update/DONE.json").read_text())
    assert set(update["router"]["before"]) == {"L0", "L1", "L2", "L3"}, update["router"]
    assert update["rft"]["attempts"] == 2 * update["rft"]["tasks"] and update["rft"]["tasks"] >= 1, update["rft"]
    print(f"cycle 1 eval: {json.dumps(ev)}")
    print(f"rsi-cycle/embedded: {cycle_run.seconds:.0f}s wall")


@pytest.mark.timeout(3600)
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
    for fact in ("tasks accepted", "HCP start → best → after", "adapter", "validation before → after",
                 "efficacy (sealed benchmark)", "16 of 427"):
        assert fact in summary


@pytest.fixture(scope="module")
def deployments(tmp_path_factory):
    from e2e_cycle import deploy_stack

    stack = deploy_stack(tmp_path_factory.mktemp("deploy"))
    try:
        yield stack
    finally:
        stack.stop()


def _api(stack, method: str, path: str, body=None):
    import httpx

    r = httpx.request(method, f"{stack.api_url}{path}", json=body, timeout=30)
    r.raise_for_status()
    return r.json()


def test_prefect_yaml_declares_the_deployments(deployments) -> None:
    found = _api(deployments, "POST", "/deployments/filter", {})
    flows = {f["id"]: f["name"] for f in _api(deployments, "POST", "/flows/filter", {})}
    names = {f"{flows[d['flow_id']]}/{d['name']}": d for d in found}
    assert {"rsi-cycle/embedded", "rsi-cycle/scheduled", "rsi-cycle/efficacy", "discovery/default",
            "expansion/default", "update/default"} <= set(names)
    assert all(d["work_pool_name"] == "mindforge" for d in names.values())
    scheduled = names["rsi-cycle/scheduled"]
    crons = [s["schedule"].get("cron") for s in scheduled["schedules"]]
    assert crons == ["0 3 * * *"] and scheduled["schedules"][0]["active"]
    # the nightly run has its own queue, which the demo's worker does not pull
    assert scheduled["work_queue_name"] == "scheduled"
    assert {d["work_queue_name"] for n, d in names.items() if n != "rsi-cycle/scheduled"} == {"default"}
    assert not names["rsi-cycle/embedded"]["schedules"]
    for name in ("rsi-cycle/embedded", "rsi-cycle/scheduled", "rsi-cycle/efficacy"):  # one run of a deployment at a time
        limit = names[name].get("global_concurrency_limit") or {}
        assert names[name].get("concurrency_limit") == 1 or limit.get("limit") == 1, names[name]
    schema = names["rsi-cycle/embedded"]["parameter_openapi_schema"]
    assert "params" in schema["properties"]
    assert names["rsi-cycle/embedded"]["parameters"]["params"]["run_dir"] == "runs/embedded"
    pool = _api(deployments, "GET", "/work_pools/mindforge")
    assert pool["type"] == "process"
    assert pool["concurrency_limit"] == 1  # one cycle's engine and trainer at a time on a machine


def test_a_deployment_run_with_bad_parameters_fails_with_the_field_named(deployments, tmp_path) -> None:
    """The worker pulls this checkout, loads the flow and validates before any engine starts."""
    params = json.dumps({"params": {"run_dir": str(tmp_path / "run"), "stages": ["expansion"],
                                    "expansion": {"budget": -1}}})
    done = deployments.run("deployment", "run", "rsi-cycle/embedded", "--params", params, "--watch",
                           "--watch-timeout", "300", timeout=400)
    from e2e_cycle import _flow_run_id

    run_id = _flow_run_id(done.stdout + done.stderr)
    state = _api(deployments, "GET", f"/flow_runs/{run_id}")["state"]
    assert state["type"] == "FAILED"
    logs = _api(deployments, "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}})
    text = "\n".join(entry["message"] for entry in logs)
    assert "/expansion/budget" in text, text[-3000:]
    assert not (tmp_path / "run" / "engine.log").exists()
