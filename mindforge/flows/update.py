"""The Update stage as a Prefect flow: GRPO on one route's adapter, handoff, then artifacts.

Artifacts: ``cycle-N-update-curve`` (one row a GRPO step),
``cycle-N-update-trajectories`` (+ pages), ``cycle-N-adapter`` (link to the
adapter version's folder), ``cycle-N-update-tensorboard`` (link to the TensorBoard
event folder: ``tensorboard --logdir`` it), ``cycle-N-update-summary``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from mindforge.flows import artifacts
from mindforge.flows.publish import publish_trajectories
from mindforge.run_services import RunServices, run_services_for
from mindforge.update.stage import UpdateConfig


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def summary_markdown(cycle: int, result: dict[str, Any]) -> str:
    parity = result.get("parity") or {}
    facts = {
        "route": result["route"], "trained": result["candidate"], "serving": result["version"],
        "promoted": result["promoted"], "reason": result.get("reason") or "-",
        "parity ok": parity.get("ok", "n/a"), "parity max |diff|": parity.get("max_abs_diff", "n/a"),
        "validation before": f"{_num(result['reward_before'])} ± {_num(result['se_before'])}",
        "validation after": f"{_num(result.get('reward_after'))} ± {_num(result.get('se_after'))}",
        "paired SE": _num(result.get("se")), "validation tasks": result["validation_tasks"],
        "HCP after": result["hcp"], "GRPO steps": len(result.get("curve") or ()),
    }
    notes = [f"adapter: `{result.get('adapter_path')}`", f"HCP file: `{result.get('hcp_path')}`",
             f"trajectories: `{result['trajectories']}`", f"tasks from: `{result['tasks_source']}`",
             f"TensorBoard: `tensorboard --logdir {result['tensorboard']}`" if result.get("tensorboard") else ""]
    return artifacts.summary_markdown(f"Update, cycle {cycle}", facts, notes)


def publish(cycle: int, result: dict[str, Any]) -> None:
    if result.get("curve"):
        artifacts.table(cycle, "update-curve", list(result["curve"]),
                        f"GRPO steps of cycle {cycle}: reward mean and std, loss, KL, clip fraction, grad norm, "
                        "completion tokens, share of groups without signal")
    publish_trajectories(cycle, "update", Path(result["trajectories"]))
    if result.get("adapter_path"):
        artifacts.link(cycle, "adapter", Path(result["adapter_path"]).resolve().as_uri(),
                       f"{result['candidate']} ({'promoted' if result['promoted'] else 'rolled back'})")
    if result.get("tensorboard"):
        folder = Path(result["tensorboard"]).resolve()
        artifacts.link(cycle, "update-tensorboard", folder.as_uri(),
                       f"TensorBoard event files of the Update (tensorboard --logdir {folder})")
    artifacts.markdown(cycle, "update-summary", summary_markdown(cycle, result), f"Update of cycle {cycle}")


@flow(name="update", log_prints=True, persist_result=True)
def update_flow(config: UpdateConfig, run: RunServices | None = None) -> dict[str, Any]:
    """Train the route's adapter with GRPO through the serving harness and hand it to the engine."""
    from mindforge.cycle.core import stored_result
    from mindforge.cycle.runtime import update_runner

    logger = get_run_logger()
    # Update has no journal: a finished one is read back, never trained twice.
    done = stored_result(config.run_dir, config.cycle, "update")
    if done is not None:
        logger.info(f"update of cycle {config.cycle} finished before; publishing its stored result")
        publish(config.cycle, done)
        return done

    def progress(done: int, total: int, row: Any = None) -> None:
        if row is not None:
            signal = ("; no group had a reward spread: nothing to learn this step" if row.skipped_groups >= row.groups
                      else f"; {row.skipped_groups} of {row.groups} groups without a reward spread")
            logger.info(f"GRPO step {done}/{total}: reward {row.mean_reward:.3f} loss {row.loss:.4f} kl {row.kl:.4f}"
                        + signal)

    with run_services_for(run, config.run_dir, config.cycle, "update", hcp=config.hcp, log=logger.info) as services:
        # The stage's own lines (router phase, rejection sampling) go to the run's log in the UI as well.
        result = dict(update_runner(services, progress, logger.info)(config))
    publish(config.cycle, result)
    return result
