"""The Expansion stage as a Prefect flow: run it (or resume it), then publish what it did.

Artifacts (keys stable per cycle): ``cycle-N-hcp-diff`` (markdown with a
diff block), ``cycle-N-expansion-candidates`` (every proposal: scores ± SE,
decision), ``cycle-N-expansion-trajectories`` (+ a page per shown
trajectory), ``cycle-N-expansion-summary``.

On a Dask or Ray task runner the solves of each task set are ``fan-out``
tasks (``flows/fanout.py``), a chunk of tasks each, run on the workers; the
result says how many ran in which processes (``fanout``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from mindforge.expansion.config import ExpansionConfig
from mindforge.flows import artifacts
from mindforge.flows.fanout import stage_mapper
from mindforge.flows.publish import publish_trajectories
from mindforge.run_services import RunServices, run_services_for


def hcp_diff_markdown(result: dict[str, Any]) -> str:
    head = [f"# HCP change in cycle {result['cycle']}", "",
            (f"Start `{result['start_hcp']}` → best `{result['best_hcp']}`: {result['accepted']} of "
            f"{result['candidates']} evaluated candidates accepted; stop: {result['stop_reason']}."), "",
            f"Best HCP file: `{result['best_hcp_path']}`", ""]
    return "\n".join(head) + result["diff_markdown"] + "\n"


def _se(se: float | None) -> str:
    return "n/a" if se is None else f"{se:.3f}"


def summary_markdown(result: dict[str, Any]) -> str:
    test, val = result["test"], result["validation"]

    def score(r: dict[str, Any]) -> str:
        return f"{r['mean']:.3f} ± {_se(r.get('se'))} (n={r['n']})"

    facts = {
        "start HCP": result["start_hcp"], "best HCP": result["best_hcp"],
        "proposals": result["proposals"], "evaluated": result["candidates"], "accepted": result["accepted"],
        "refused by policy": result["refused"], "rollouts": result["rollouts"],
        "noise floor": result["noise_floor"], "stop": result["stop_reason"],
        "validation start": score(val["start"]), "validation best": score(val["best"]),
        "test start": score(test["start"]), "test best": score(test["best"]),
        "test gain (paired SE)": f"{test['gain']:+.3f} ({_se(test['se'])})",
        "seconds": result["elapsed_s"],
    }
    c = result["cycle"]
    notes = [f"HCP diff: artifact `{artifacts.key(c, 'hcp-diff')}`",
             f"trajectories: artifact `{artifacts.key(c, 'expansion-trajectories')}`"]
    notes += [f"{name}: `{path}`" for name, path in result["files"].items()]
    return artifacts.summary_markdown(f"Expansion, cycle {c}", facts, notes)


def publish(result: dict[str, Any]) -> None:
    c = result["cycle"]
    artifacts.markdown(c, "hcp-diff", hcp_diff_markdown(result), f"HCP diff of cycle {c} (start → best)")
    if result["candidate_rows"]:
        artifacts.table(c, "expansion-candidates", result["candidate_rows"],
                        f"every HCP edit proposed in cycle {c}, with its validation score and decision")
    publish_trajectories(c, "expansion", Path(result["files"]["trajectories"]))
    artifacts.markdown(c, "expansion-summary", summary_markdown(result), f"Expansion of cycle {c}")


@flow(name="expansion", log_prints=True, persist_result=True)
def expansion_flow(config: ExpansionConfig, run: RunServices | None = None) -> dict[str, Any]:
    """Solve the cycle's tasks through the HCP, audit, and edit the HCP while gains are real."""
    from mindforge.cycle.runtime import expansion_runner

    logger = get_run_logger()
    mapper = stage_mapper()  # Dask or Ray: each chunk of solves a task on a worker
    with run_services_for(run, config.run_dir, config.cycle, "expansion", hcp=config.start_hcp,
                          log=logger.info) as services:
        result = dict(expansion_runner(services, logger.info, mapper=mapper)(config))
    if mapper is not None:
        result["fanout"] = mapper.facts()
    publish(result)
    return result
