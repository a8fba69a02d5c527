"""The Discovery stage as a Prefect flow: candidates judged as mapped tasks, then published.

Judge tasks share the live services (sandbox pool, engine client) of the flow run in this
process, so they run on a thread task runner.

Resuming is the journal's job, not Prefect's cache: every proposal and every
decision is a line in ``cycles/N/discovery/journal.jsonl``, so a rerun of a
killed flow judges only the candidates without a decision (none twice, none
lost) whatever result storage the flow ran with. A judge task retries only on
``InfraError`` (sandbox or engine trouble); a rejection is a result, not a
failure.

Artifacts: ``cycle-N-discovery-accepted`` (id, family, proposer, parent,
solve rate, interval, learnability), ``cycle-N-discovery-rejections`` (count
per reason and every rejected candidate), ``cycle-N-discovery-summary``.
"""

from __future__ import annotations

import threading
from typing import Any

from prefect import flow, get_run_logger, task, unmapped

from flows import artifacts
from mindforge.discovery.config import DiscoveryConfig

# Live services of the flow runs in this process, by flow run id: tasks on a
# thread runner share them; they are not task parameters (not serializable).
_LIVE: dict[str, Any] = {}
_LOCK = threading.Lock()


def _infra_only(task: Any, task_run: Any, state: Any) -> bool:
    from mindforge.discovery.verify import InfraError

    try:
        state.result()
    except InfraError:
        return True
    except Exception:  # noqa: BLE001 - anything else is a bug or a rejection: do not retry
        return False
    return False


@task(name="judge-candidate", retries=2, retry_delay_seconds=2, retry_condition_fn=_infra_only,
      persist_result=False, task_run_name="candidate-{index}")
def judge_candidate(live_key: str, index: int) -> dict[str, Any]:
    from mindforge.discovery.stage import judge

    config, services, journal, pending, pool_by_id = _LIVE[live_key]
    if index in journal.decisions:  # judged by an earlier attempt of this run
        d = journal.decisions[index]
    else:
        p, t = pending[index]
        d = judge(config, services, p, t, pool_by_id)  # raises InfraError: retried
        journal.add_decision(d)
    return {"index": index, "accepted": d.accepted, "reason": d.reason}


def summary_markdown(result: dict[str, Any]) -> str:
    facts = {"candidates": result["candidates"], "accepted": result["accepted"],
             "by family": ", ".join(f"{k} {v}" for k, v in result["by_family"].items()) or "-",
             "rejected": ", ".join(f"{k} {v}" for k, v in result["rejected"].items()) or "-",
             "acceptance rate": result["acceptance_rate"], "accepted tasks per minute": result["tasks_per_minute"],
             "seconds": result["seconds"], "HCP version": result["hcp_version"]}
    by_proposer = [f"{k}: {v['accepted']}/{v['candidates']} accepted" for k, v in result["by_proposer"].items()]
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
def discovery_flow(config: DiscoveryConfig, engine_url: str | None = None) -> dict[str, Any]:
    """Propose, verify, measure and archive the cycle's new tasks (resumes from the journal)."""
    import time

    from prefect.runtime import flow_run

    from mindforge.discovery.output import finish, finished_result
    from mindforge.discovery.runtime import open_services
    from mindforge.discovery.stage import open_journal, prepare, round_ends
    from mindforge.settings import load_settings

    logger = get_run_logger()
    done = finished_result(config)
    if done is not None:
        logger.info(f"cycle {config.cycle}: discovery finished before; publishing its stored result")
        result = done.model_dump(mode="json")
        publish(result)
        return result
    settings = load_settings()
    if engine_url:
        settings = settings.model_copy(update={"engine_url": engine_url})
    start = time.monotonic()
    key = str(flow_run.id or id(config))
    with open_services(settings, config, log=logger.info) as services:
        journal = open_journal(config)
        infra = 0
        try:
            for upto in round_ends(config):  # a round's staircase levels follow the rounds before it
                _, pending, pool_by_id = prepare(config, services, upto, journal)
                logger.info(f"candidates before {upto}: {len(pending)} left to judge")
                with _LOCK:
                    _LIVE[key] = (config, services, journal, {p.index: (p, t) for p, t in pending}, pool_by_id)
                futures = judge_candidate.map(unmapped(key), [p.index for p, _ in pending])
                states = [f.wait() or f.state for f in futures]
                infra += sum(1 for s in states if not s.is_completed())
        finally:
            with _LOCK:
                _LIVE.pop(key, None)
        out = finish(config, journal, time.monotonic() - start, services.hcp_version, infra_pending=infra)
    result = out.model_dump(mode="json")
    publish(result)
    return result
