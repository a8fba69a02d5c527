"""The Discovery stage as a Prefect flow: the library's ``run_discovery``, then its artifacts.

Like the other stage flows it calls the stage through the same runner the
CLI uses, on the run's services (``mindforge.run_services``) when the cycle
hands them over, else on services opened for this flow alone.

Resuming is the journal's job, not Prefect's cache: every proposal and every
decision is a line in ``cycles/N/discovery/journal.jsonl``, so a rerun of a
killed flow judges only the candidates without a decision (none twice, none
lost) whatever result storage the flow ran with.

On the thread runner the stage judges in its own thread pool; on a Dask or
Ray task runner each judgement is a ``fan-out`` task (``flows/fanout.py``)
that carries its candidate as data and runs on a worker, and the result says
how many tasks ran in which processes (``fanout``).

Artifacts: ``cycle-N-discovery-accepted`` (id, family, proposer, parent,
solve rate, interval, learnability), ``cycle-N-discovery-rejections`` (count
per reason and every rejected candidate), ``cycle-N-discovery-summary``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from mindforge.discovery.config import DiscoveryConfig
from mindforge.flows import artifacts
from mindforge.flows.fanout import stage_mapper
from mindforge.run_services import RunServices, run_services_for


def summary_markdown(result: dict[str, Any]) -> str:
    facts = {"candidates": result["candidates"], "accepted": result["accepted"],
             "by family": ", ".join(f"{k} {v}" for k, v in result["by_family"].items()) or "-",
             "rejected": ", ".join(f"{k} {v}" for k, v in result["rejected"].items()) or "-",
             "acceptance rate": result["acceptance_rate"], "accepted tasks per minute": result["tasks_per_minute"],
             "seconds": result["seconds"], "HCP version": result["hcp_version"]}
    by_proposer = [f"{k}: {v['accepted']}/{v['candidates']} accepted" for k, v in result["by_proposer"].items()]
    accepting = {k: v for k, v in result.get("by_generator", {}).items() if v["accepted"]}
    if accepting:
        by_proposer.append("accepted by generator: " + ", ".join(f"{k} {v['accepted']}/{v['candidates']}"
                                                                  for k, v in accepting.items()))
    return artifacts.summary_markdown(f"Discovery, cycle {result['cycle']}", facts,
                                      [*by_proposer, f"dataset: `{result['dataset']}`",
                                       f"rejected candidates: `{result['rejected_path']}`"])


def publish(result: dict[str, Any]) -> None:
    c = result["cycle"]
    if result["accepted_rows"]:
        artifacts.table(c, "discovery-accepted", result["accepted_rows"],
                        f"tasks accepted in cycle {c} with the current model's solve rate")
    reasons = [{"reason": k, "count": v} for k, v in result["rejected"].items()]
    artifacts.table(c, "discovery-rejections", reasons + result["rejection_rows"],
                    f"rejections in cycle {c}: count per reason, then every rejected candidate")
    artifacts.markdown(c, "discovery-summary", summary_markdown(result), f"Discovery of cycle {c}")


@flow(name="discovery", log_prints=True, persist_result=True)
def discovery_flow(config: DiscoveryConfig, run: RunServices | None = None) -> dict[str, Any]:
    """Propose, verify, measure and archive the cycle's new tasks (resumes from the journal)."""
    from mindforge.cycle.runtime import discovery_runner
    from mindforge.discovery.output import finished_result
    from mindforge.discovery.runtime import needs_engine

    logger = get_run_logger()
    done = finished_result(config)
    if done is not None:
        logger.info(f"cycle {config.cycle}: discovery finished before; publishing its stored result")
        result = done.model_dump(mode="json")
    else:
        mapper = stage_mapper()  # Dask or Ray: each judgement a task on a worker
        with run_services_for(run, config.run_dir, config.cycle, "discovery", hcp=config.hcp,
                              engine=needs_engine(config), log=logger.info) as services:
            result = dict(discovery_runner(services, logger.info, mapper=mapper)(config))
        if mapper is not None:
            result["fanout"] = mapper.facts()
    publish(result)
    return result
