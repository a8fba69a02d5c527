"""The RSI cycle flow: N cycles, each a subflow running Discovery, Expansion and Update as subflows.

``rsi_cycle(params)`` is what ``prefect deployment run 'rsi-cycle/embedded'``
starts. Resume and hand-over are ``mindforge.cycle``'s (stage ``DONE.json``
files, ``summary.json`` per cycle), so retrying a failed flow run with the
same parameters starts at the stage that failed. Before the first cycle the
model folder and the sandbox image are prepared concurrently as tasks; one
engine then serves every stage of the run (reused when one already runs):
the run's services are built once and handed to each stage subflow.
Each stage subflow gets the task runner the parameters name (thread pool,
or Dask/Ray on a cluster) for its fan-out.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.runtime import flow_run

from mindforge.cycle import CycleConfig, CycleResult, run_cycle, run_cycles
from mindforge.cycle.config import validate_stage_configs
from mindforge.cycle.core import StageRunner, generation_line, planned_first_cycle
from mindforge.eval.report import efficacy_cell
from mindforge.flows import artifacts
from mindforge.flows.discovery import discovery_flow
from mindforge.flows.eval import eval_flow
from mindforge.flows.expansion import expansion_flow
from mindforge.flows.task_runners import make_task_runner
from mindforge.flows.update import update_flow
from mindforge.run_services import RunServices, open_run_services
from mindforge.settings import Settings


@task(name="prepare-model", retries=1)
def prepare_model(settings: Settings) -> str:
    from mindforge.engine.registry import resolve_model

    return str(resolve_model(settings.model, settings))


@task(name="prepare-sandbox-image", retries=1)
def prepare_sandbox() -> str:
    from mindforge.sandbox import SandboxConfig, ensure_image

    return ensure_image(SandboxConfig())


def prepare(settings: Settings) -> None:
    """Model conversion and image build are independent and slow on first use: run them side by side."""
    for future in (prepare_model.submit(settings), prepare_sandbox.submit()):
        future.result()


def stage_runners(params: CycleConfig, run: RunServices) -> dict[str, StageRunner]:
    """Each stage as a subflow on the task runner the parameters name, on the run's services."""

    def runner() -> Any:
        return make_task_runner(params.task_runner, params.max_workers, params.task_runner_options)

    return {
        "discovery": lambda config: discovery_flow.with_options(task_runner=runner())(config, run=run),
        "expansion": lambda config: expansion_flow.with_options(task_runner=runner())(config, run=run),
        "update": lambda config: update_flow.with_options(task_runner=runner())(config, run=run),
        "eval": lambda config: eval_flow.with_options(task_runner=runner())(config, run=run),
    }


def summary_markdown(result: CycleResult) -> str:
    c = result.cycle
    val = result.validation
    facts = {
        "tasks accepted": result.tasks_accepted if result.tasks_accepted is not None else "discovery skipped",
        "by family": ", ".join(f"{k} {v}" for k, v in sorted(result.tasks_by_family.items())) or "-",
        "task archive (all cycles)": result.archive_tasks,
        "HCP start → best → after": f"{result.hcp_start} → {result.hcp_best} → {result.hcp_after}",
        "HCP fields changed": ", ".join(result.hcp_changed_paths) or "none",
        "expansion test start → best": f"{result.expansion_test.get('start')} → {result.expansion_test.get('best')}",
        "adapter": f"{result.adapter.get('version', '-')} ({'promoted' if result.adapter.get('promoted') else 'kept'})",
        "validation before → after": f"{val.get('reward_before')} → {val.get('reward_after')} (paired SE {val.get('se')})",
        "efficacy (sealed benchmark)": efficacy_cell(result.eval),
        "stages": ", ".join(f"{k} {v.status} {v.seconds:.0f}s" for k, v in result.stages.items()),
        "generation by stage": "; ".join(f"{k} {generation_line(v.generation)}" for k, v in result.stages.items()
                                        if v.generation) or "-",
        "seconds": result.seconds,
    }
    links = [f"[{what}](/artifacts/key/{artifacts.key(c, what)})"
             for what in ("hcp-diff", "expansion-summary", "expansion-trajectories", "update-summary",
                          "update-trajectories", "discovery-summary", "efficacy", "efficacy-chart")]
    return artifacts.summary_markdown(f"RSI cycle {c}", facts, [" · ".join(links)])


@flow(name="cycle", flow_run_name="cycle-{cycle}", log_prints=True, persist_result=True)
def cycle_flow(params: CycleConfig, cycle: int, run: RunServices) -> dict[str, Any]:
    """One cycle; stages already finished in this run directory are read back, not run."""
    logger = get_run_logger()
    result = run_cycle(params, cycle, stage_runners(params, run), log=logger.info, meter=run.generation_counters)
    artifacts.markdown(cycle, "summary", summary_markdown(result), f"RSI cycle {cycle}: the stages together")
    return result.model_dump(mode="json")


# A failed run is retried once: every finished stage left its DONE.json, so the retry resumes at the
# stage that failed (a bad parameter fails the retry again, at once, before anything slow starts).
# The timeout bounds a nightly run that hangs (an engine that stopped answering mid-request).
@flow(name="rsi-cycle", log_prints=True, persist_result=True, retries=1, retry_delay_seconds=30,
      timeout_seconds=8 * 3600)
def rsi_cycle(params: CycleConfig) -> list[dict[str, Any]]:
    """Run ``params.cycles`` RSI cycles, each from the HCP, adapters and task archive the last one left."""
    from mindforge.settings import load_settings

    logger = get_run_logger()
    settings = load_settings().with_engine(params.engine)
    first = params.first_cycle or planned_first_cycle(params.run_dir, flow_run.id)  # id None outside a run
    params = params.model_copy(update={"first_cycle": first})
    validate_stage_configs(params, first)  # before anything slow starts
    logger.info(f"run {params.run_dir}: cycles {first}..{first + params.cycles - 1}, stages {params.stages}")
    prepare(settings)
    with open_run_services(settings, params.run_dir, first, log=logger.info) as run:
        results = run_cycles(
            params, {"eval": lambda config: eval_flow(config, run=run)}, logger.info,  # the cycle-0 baseline
            one_cycle=lambda cfg, n: CycleResult.model_validate(cycle_flow(cfg, n, run=run)),
        )
    return [r.facts() for r in results]
