"""Learning-rate sweep of the rejection-sampling phase on a run's own verified answers.

    python benchmarks/rft_lr_sweep.py RUN_DIR [--cycles 1,2,3] [--lrs 3e-5,1e-4,3e-4,1e-3] [--epochs 2]
                                      [--with-discovery]

Reads the attempts the Updates of the given cycles made (``cycles/N/update/
trajectories/rft-attempts.parquet``; several cycles pool their verified
answers, a task's attempts from every cycle counted together), keeps the
passes as the phase does (``--with-discovery``: with Discovery's passes, as
the phase trains on them), and splits them by task (hashed ids: a quarter of
the tasks with a pass held out). For each learning
rate it fine-tunes the route's starting adapter from the run's catalog with
the phase's own ``supervised_fit`` and reports the mean per-token NLL of the
held-out tasks' correct answers before and after (lower: the adapter puts
more mass on programs that pass on tasks it never trained on) and of the
training answers (how far it fits). It needs no engine and no sandbox: the
verdicts are the ones stored with the attempts.

This measures likelihood, not pass rate; the cycle's sealed eval and the
Update's validation reward are the measures of record.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path


def masked_nll(model, samples) -> float:
    """Mean NLL a completion token over ``samples`` (their loss mask), no grad."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([list(s.ids)])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
            target = ids[0, 1:]
            mask = torch.tensor(list(s.mask[1:]), dtype=torch.bool)
            picked = logp.gather(1, target[:, None])[:, 0]
            total += float(-(picked[mask]).sum())
            count += int(mask.sum())
    model.train()
    return total / max(count, 1)


def main() -> int:
    from mindforge.catalog import AdapterCatalog
    from mindforge.engine.registry import resolve_model
    from mindforge.settings import load_settings
    from mindforge.store import read_parquet
    from mindforge.tasks.models import Trajectory
    from mindforge.update import rft
    from mindforge.update.policy import load_policy
    from mindforge.update.trainer import GRPOConfig, GRPOTrainer, supervised_fit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--cycles", default="1", help="comma-separated cycles whose attempts are pooled")
    ap.add_argument("--route", default="L2")
    ap.add_argument("--lrs", default="3e-5,1e-4,3e-4,1e-3")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-per-task", type=int, default=2)
    ap.add_argument("--with-discovery", action="store_true",
                    help="also Discovery's passes answered by the route in those cycles, as the phase trains on them")
    args = ap.parse_args()

    attempts: list[Trajectory] = []
    paths = [args.run_dir / "cycles" / c.strip() / "update" / "trajectories" / "rft-attempts.parquet"
             for c in args.cycles.split(",")]
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: no rejection-sampling attempts (run an Update with rft enabled first)")
        attempts += read_parquet(path, Trajectory)
    path = ", ".join(map(str, paths))
    by_task: dict[str, list[Trajectory]] = {}
    for t in attempts:
        by_task.setdefault(t.task_id, []).append(t)
    if args.with_discovery:
        for c in args.cycles.split(","):
            found = rft.discovery_passes(args.run_dir / "cycles" / c.strip() / "discovery" / "trajectories", None,
                                         args.route)
            for tid, passes in found.items():
                by_task.setdefault(tid, []).extend(passes)
    kept = rft.keep([g for tid, g in sorted(by_task.items())], args.max_per_task)
    # A quarter of the tasks that have a kept answer, at least one, by hashed id: passes are sparse (a run's
    # attempts passed on 6 of 36 tasks), and a split over all tasks can leave the held-out side empty.
    passing = sorted((g[0].task_id for g in kept if g), key=lambda tid: hashlib.sha256(tid.encode()).hexdigest())
    held_ids = set(passing[:max(1, len(passing) // 4)]) if len(passing) > 1 else set()
    train_groups = [g for g in kept if g and g[0].task_id not in held_ids]
    held_groups = [g for g in kept if g and g[0].task_id in held_ids]
    train, held = rft.samples_of(train_groups, args.route), rft.samples_of(held_groups, args.route)
    print(f"{path}: {len(attempts)} attempts (and Discovery's passes: {args.with_discovery}) on {len(by_task)} "
          f"tasks; passes kept: {len(train)} answers of "
          f"{len(train_groups)} training tasks, {len(held)} of {len(held_groups)} held-out tasks", flush=True)
    if not train or not held:
        raise SystemExit("too few passes to sweep: need passing answers on both sides of the split")

    settings = load_settings()
    model_path = resolve_model("smollm2-135m-instruct", settings)
    catalog = AdapterCatalog(args.run_dir / "adapters")
    start = catalog.find(f"mf-{args.route}-v0000")
    rows = []
    for lr in [float(x) for x in args.lrs.split(",")]:
        policy = load_policy(model_path, start.path)
        before = (masked_nll(policy, train), masked_nll(policy, held))
        trainer = GRPOTrainer(policy, GRPOConfig(route=args.route, lr=lr))
        t0 = time.monotonic()
        losses = supervised_fit(trainer, train, epochs=args.epochs, batch_size=args.batch_size, seed=0, label="sweep")
        after = (masked_nll(policy, train), masked_nll(policy, held))
        rows.append({"lr": lr, "steps": len(losses), "train_nll_before": round(before[0], 4),
                     "train_nll_after": round(after[0], 4), "heldout_nll_before": round(before[1], 4),
                     "heldout_nll_after": round(after[1], 4), "seconds": round(time.monotonic() - t0, 1)})
        print(f"lr {lr:.0e}: train NLL {before[0]:.4f} -> {after[0]:.4f}, held-out NLL {before[1]:.4f} -> "
              f"{after[1]:.4f} ({len(losses)} steps, {rows[-1]['seconds']}s)", flush=True)
        del policy, trainer
    print(json.dumps({"source": str(path), "train_answers": len(train), "heldout_answers": len(held), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
