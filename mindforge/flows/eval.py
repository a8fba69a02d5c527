"""The eval stage as a Prefect flow: the sealed benchmark through the served harness, then its artifacts.

Artifacts: ``cycle-N-efficacy`` (a row a cycle so far: pass@1 ± SE, the
paired comparison with the previous cycle and with cycle 0, routing),
``cycle-N-efficacy-chart`` (pass@1 by cycle with error bars, an image the
UI shows) and ``cycle-N-eval-summary``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from mindforge.eval.config import EvalConfig
from mindforge.flows import artifacts
from mindforge.flows.fanout import stage_mapper
from mindforge.run_services import RunServices, run_services_for
from mindforge.tracking import cycle_log_dir


def summary_markdown(result: dict[str, Any]) -> str:
    from mindforge.eval.records import EvalResult
    from mindforge.eval.report import efficacy_rows

    r = EvalResult.model_validate(result)
    row = efficacy_rows([r])[0]
    facts = {"benchmark": row["bench"], "tasks": r.n, "pass@1 (greedy)": f"{r.pass_at_1:.4f} ± {r.se:.4f}",
             **r.pass_at_k, "vs previous cycle": row["vs previous cycle"], "vs cycle 0": row["vs cycle 0"],
             "HCP": r.hcp, "adapters": ", ".join(f"{k} {v}" for k, v in r.adapters.items()),
             "seconds": r.seconds if not r.reused else "reused stored results"}
    return artifacts.summary_markdown(f"Eval after cycle {r.cycle}" if r.cycle else "Eval: cycle 0 (baseline)",
                                      facts, [f"routing: {line}" for line in str(row["routing"]).split("; ")])


def publish(result: dict[str, Any]) -> None:
    from prefect.artifacts import create_image_artifact

    from mindforge.eval.chart import data_url
    from mindforge.eval.report import efficacy, efficacy_rows

    c = result["cycle"]
    history = [r for r in efficacy(result["run_dir"], result["bench"]) if r.cycle <= c]
    artifacts.table(c, "efficacy", efficacy_rows(history),
                    f"pass@1 on the sealed benchmark {result['bench']} by cycle, paired comparisons, routing")
    create_image_artifact(image_url=data_url(history, f"pass@1 on {result['bench']} by cycle"),
                          key=artifacts.key(c, "efficacy-chart"),
                          description=f"pass@1 on {result['bench']} by cycle (±1 SE)")
    artifacts.markdown(c, "eval-summary", summary_markdown(result), f"Eval after cycle {c}")
    board = cycle_log_dir(result["run_dir"], "eval").parent.resolve()
    artifacts.link(c, "tensorboard", board.as_uri(),
                   f"TensorBoard of the run, a step a cycle: eval and routing (tensorboard --logdir {board})")


@flow(name="eval", log_prints=True, persist_result=True)
def eval_flow(config: EvalConfig, run: RunServices | None = None) -> dict[str, Any]:
    """Score the sealed benchmark with what the cycle left in force; compare with earlier cycles."""
    from mindforge.cycle.runtime import eval_runner

    logger = get_run_logger()
    mapper = stage_mapper()  # Dask or Ray: each missing shard a task on a worker
    with run_services_for(run, config.run_dir, config.cycle, "eval", log=logger.info) as services:
        result = dict(eval_runner(services, logger.info, mapper=mapper)(config))
    if mapper is not None:
        result["fanout"] = mapper.facts()
    publish({**result, "run_dir": str(config.run_dir)})
    return result
