"""`mindforge update`: one Update stage (GRPO on a route's adapter, then handoff)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors


@user_errors()
def update(
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory (created if missing).")],
    cycle: Annotated[int, typer.Option("--cycle", min=0, help="Cycle number.")] = 1,
    steps: Annotated[int, typer.Option("--steps", min=0, help="GRPO steps.")] = 2,
    route: Annotated[str, typer.Option("--route", help="Route whose adapter is trained.", **choices("L0", "L1", "L2", "L3"))] = "L2",
    hcp: Annotated[Path | None, typer.Option("--hcp", help="HCP file to start from.")] = None,
    group_size: Annotated[int, typer.Option("--group-size", min=2, help="Rollouts a task (G).")] = 4,
    batch_tasks: Annotated[int, typer.Option("--batch-tasks", min=1, help="Tasks a step.")] = 2,
    reward: Annotated[str | None, typer.Option(
        "--reward", help="Rollout reward.", show_default="the HCP's verifier setting",
        **choices("binary", "pass_fraction"))] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Answer cap in rollouts.")] = 192,
    validation_tasks: Annotated[int, typer.Option("--validation-tasks", min=1)] = 4,
    validation_samples: Annotated[int, typer.Option("--validation-samples", min=1)] = 2,
    max_difficulty: Annotated[int | None, typer.Option("--max-difficulty", min=1, max=3)] = None,
    loss_type: Annotated[str | None, typer.Option(
        "--loss-type", help="GRPO loss normalisation.", show_default="GRPOConfig's, dapo",
        **choices("grpo", "dr_grpo", "dapo"))] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate.", show_default="GRPOConfig's, 1e-5")] = None,
    routing: Annotated[str, typer.Option(
        "--routing", help="pinned: the trained route answers every rollout (no route hop); "
                          "routed: the router decides, as in production", **choices("pinned", "routed"))] = "pinned",
    rft: Annotated[bool, typer.Option("--rft/--no-rft", help="Rejection sampling: fine-tune on the route's own "
                                                              "verified answers before GRPO.")] = True,
    rft_attempts: Annotated[int, typer.Option("--rft-attempts", min=1, help="Attempts a task (K).")] = 4,
    rft_tasks: Annotated[int, typer.Option("--rft-tasks", min=1, help="Tasks attempted.")] = 48,
    router: Annotated[bool, typer.Option("--router/--no-router", help="Train L0's route hop when routing "
                                                                     "accuracy is below the threshold.")] = True,
    router_threshold: Annotated[float, typer.Option("--router-threshold", min=0.0, max=1.0)] = 0.9,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", min=1, help="GRPO steps between "
                                                                                    "checkpoints.")] = 1,
    tracking: Annotated[list[str] | None, typer.Option(
        "--tracking", help="Where step scalars go (repeat for several).", show_default="tensorboard",
        **choices("tensorboard", "mlflow", "wandb"))] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON summary object.")] = False,
    engine: EngineOption = None,
) -> None:
    """Train a route's LoRA adapter with GRPO through the serving harness and hand it to the engine.

    Uses a healthy engine when one runs (MINDFORGE_ENGINE_URL, or the one `mindforge up` started), else starts the embedded engine on the default model, and a sandbox pool; what it started it stops.

    With --json the last line is one JSON object: route, version, parity {ok, max_abs_diff}, reward_before, reward_after, se (standard error of the paired per-task difference after - before), hcp (hash of the HCP in force).
    """
    from mindforge.errors import InputError
    from mindforge.run_services import open_run_services
    from mindforge.update.runtime import open_services
    from mindforge.update.stage import UpdateConfig, run_update

    grpo: dict[str, object] = {}
    if loss_type is not None:
        grpo["loss_type"] = loss_type
    if lr is not None:
        grpo["lr"] = lr
    try:
        config = UpdateConfig(
            run_dir=run_dir, cycle=cycle, route=route, steps=steps, group_size=group_size,
            batch_tasks=batch_tasks, reward=reward, max_tokens=max_tokens, hcp=hcp,
            validation_tasks=validation_tasks, validation_samples=validation_samples,
            max_difficulty=max_difficulty, grpo=grpo, seed=seed, routing=routing,
            rft={"enabled": rft, "attempts": rft_attempts, "max_tasks": rft_tasks},
            router={"enabled": router, "threshold": router_threshold}, checkpoint_every=checkpoint_every,
            **({"tracking": tuple(tracking)} if tracking else {}),
        )
    except ValueError as exc:
        raise InputError("mindforge update", "", str(exc).replace("\n", "; ")) from None
    from mindforge.cli.progress import stage_bar

    with stage_bar("update", "GRPO steps", enabled=not as_json) as bar:
        def progress(done: int, total: int, row=None) -> None:
            bar.update(done, total, None if row is None else
                       f"reward {row.mean_reward:.3f} loss {row.loss:.4f} kl {row.kl:.4f} tokens {row.tokens}")

        with open_run_services(settings_with_engine(engine), run_dir, cycle, "update", hcp=hcp, log=bar.log) as run, \
                open_services(run, config, progress=progress, log=bar.log) as services:
            result = run_update(config, services)
    if as_json:
        print(json.dumps(result.summary()))
        return
    _print_result(result)


def _print_result(result) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("step", "mean reward", "loss", "KL", "clip", "tokens", "dropped", "s")
    for r in result.curve:
        table.add_row(str(r.step), f"{r.mean_reward:.3f}", f"{r.loss:.4f}", f"{r.kl:.4f}",
                      f"{r.clip_fraction:.3f}", str(r.tokens), str(r.dropped), f"{r.seconds:.1f}")
    console.print(table)
    if result.router is not None:
        r = result.router
        console.print(f"router: {r.reason}")
        console.print(f"  routing accuracy by family, before: {r.before}" + (f"; after: {r.after}" if r.after else ""))
    if result.rft is not None:
        f = result.rft
        console.print(f"rejection sampling: {f.passes}/{f.attempts} attempts passed on {f.tasks_with_pass}/{f.tasks} "
                      f"tasks, and {f.discovery_passes} of Discovery's ({f.reject_passes} on its verified rejects); {f.kept} answers kept, {f.steps} steps (nll {f.losses[:1]} -> {f.losses[-1:]}); "
                      f"{len(f.spread_tasks)} tasks with a spread for GRPO" + (f"; {f.reason}" if f.reason else ""))
    p = result.parity
    console.print(f"route {result.route}: trained {result.candidate}; serving {result.version}"
                  f" ({'promoted' if result.promoted else 'rolled back: ' + result.reason})")
    if p is not None:
        console.print(f"parity: ok={p.ok} max |diff|={p.max_abs_diff:.2e} (tolerance {p.tolerance:g}, "
                      f"{p.tokens} tokens, separation {p.separation if p.separation is None else f'{p.separation:.2e}'})")
    after = "n/a" if result.reward_after is None else f"{result.reward_after:.3f} ± {result.se_after:.3f}"
    console.print(f"validation ({result.validation_tasks} tasks): before {result.reward_before:.3f} ± "
                  f"{result.se_before:.3f}, after {after}; paired SE {result.se}")
    console.print(f"HCP {result.hcp}" + (f" at {result.hcp_path}" if result.hcp_path else ""))
