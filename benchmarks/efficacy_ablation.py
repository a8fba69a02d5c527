"""What Expansion and Update each did to the sealed number: an ablation on one run's own outputs.

    python benchmarks/efficacy_ablation.py RUN_DIR [--cycle N] [--max-tasks 100]

The HCP a cycle leaves has two parts that the stages change independently:
its prompts and settings (Expansion's edits) and the adapter versions it
serves (Update's training, the router's included). Crossing them with the
run's starting HCP gives four configurations, all scored by ``mindforge
eval`` on the same sealed tasks (the fixed subset the run's evals use):

- neither: the starting HCP and adapters (the run's cycle-0 eval);
- Expansion alone: cycle N's prompts and settings, the starting adapters;
- Update alone: the starting prompts and settings, cycle N's adapters;
- both: what cycle N left (the run's cycle-N eval).

Each is paired with "neither" on the same tasks. The two diagnostic evals are
stored beside the run's evals (never as a cycle's), and a rerun reuses them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MF = str(REPO / ".venv" / "bin" / "mindforge")


def _eval(run_dir: Path, cycle: int, max_tasks: int | None, *extra: str) -> dict:
    argv = [MF, "eval", "--run-dir", str(run_dir), "--cycle", str(cycle), "--json", *extra]
    if max_tasks:
        argv += ["--max-tasks", str(max_tasks)]
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    from mindforge.cycle import next_cycle
    from mindforge.eval.report import stored_eval
    from mindforge.store import RunDir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--cycle", type=int, default=None, help="the cycle whose HCP is taken apart (default: last)")
    ap.add_argument("--bench", default="mbpp")
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    cycle = args.cycle if args.cycle is not None else next_cycle(args.run_dir) - 1
    base = stored_eval(args.run_dir, args.bench, exactly=0)
    final = stored_eval(args.run_dir, args.bench, exactly=cycle)
    if base is None or final is None or cycle < 1:
        raise SystemExit(f"{args.run_dir} needs its cycle-0 eval and cycle {cycle}'s eval first "
                         "(make efficacy, or mindforge eval --cycle N)")
    max_tasks = base[0].n  # the run's own subset: the same tasks, so every row pairs with cycle 0
    start, end = run.hcp_in_force(0, "eval"), run.hcp_in_force(cycle, "eval")
    rows = {
        "neither (cycle 0)": base[0].summary(),
        "Expansion alone": _eval(args.run_dir, cycle, max_tasks, "--adapters-from", str(start)),
        "Update alone": _eval(args.run_dir, cycle, max_tasks, "--hcp", str(start), "--adapters-from", str(end)),
        f"both (cycle {cycle})": final[0].summary(),
    }
    print(f"\nablation of cycle {cycle} of {args.run_dir} on {args.bench}, {base[0].n} tasks "
          f"(start HCP {start.name}, cycle {cycle}'s {end.name})")
    print(f"{'configuration':<20} {'pass@1':>7} {'± SE':>6}   vs cycle 0, paired on the same tasks")
    for name, r in rows.items():
        p = r.get("vs_cycle0")
        vs = "-" if not p else (f"{p['diff']:+.3f} ± {p['paired_se']:.3f} (+{p['gained']}/-{p['lost']}, "
                                f"McNemar p={p['mcnemar_p']:.3g})")
        print(f"{name:<20} {r['pass@1']:>7.3f} {r['se']:>6.3f}   {vs}")
    print(json.dumps({"cycle": cycle, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
