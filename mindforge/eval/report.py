"""Reading evals back: per-task scores, routing shares, and every cycle's eval of a run.

An eval of cycle N is ``cycles/N/eval/DONE.json`` (the ``EvalResult``); its
rows are the parquet shards under ``evals/<bench>/<key>/``. Cheap enough for
``mindforge status`` while a cycle runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mindforge.eval.records import EvalResult, EvalRow
from mindforge.eval.stats import Paired
from mindforge.store import RunDir, read_parquet


def scores_of(rows: Sequence[EvalRow]) -> dict[str, float]:
    """Task id -> greedy pass (1.0 or 0.0)."""
    return {r.task_id: float(r.passed) for r in rows if r.mode == "greedy"}


def routing_shares(rows: Sequence[EvalRow]) -> dict[str, dict[str, float]]:
    """Family -> route -> share of that family's requests the router sent there."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.mode == "greedy":
            fam = counts.setdefault(r.family, {})
            fam[r.route] = fam.get(r.route, 0) + 1
    return {fam: {route: round(n / sum(c.values()), 4) for route, n in sorted(c.items())}
            for fam, c in sorted(counts.items())}


def routing_words(result: EvalResult) -> list[str]:
    """E.g. "L2 tasks: 0% to L2, 100% to L0 (pass@1 L0 0.05)": where each family's requests went."""
    out = []
    for fam, shares in result.routing.items():
        spread = sorted(shares.items(), key=lambda kv: (kv[0] != fam, -kv[1]))
        parts = [f"{share:.0%} to {route}" for route, share in spread]
        if fam not in shares:
            parts.insert(0, f"0% to {fam}")
        rates = ", ".join(f"{route} {result.by_route[route]['pass@1']:.3f}" for route, _ in spread
                          if route in result.by_route)
        out.append(f"{fam} tasks: {', '.join(parts)} (pass@1 by route: {rates})")
    return out


def _result(run: RunDir, n: int) -> EvalResult | None:
    marker = run.done_marker(n, "eval")
    if not marker.is_file():
        return None
    try:
        return EvalResult.model_validate(json.loads(marker.read_text(encoding="utf-8")))
    except ValueError:
        return None


def efficacy(run_dir: Path, bench: str | None = None) -> list[EvalResult]:
    """Every cycle's eval of the run (of ``bench`` when given), in cycle order; cycle 0 is the baseline."""
    run = RunDir(run_dir)
    found = [_result(run, n) for n in run.cycles()]
    return [r for r in found if r is not None and (bench is None or r.bench == bench)]


def stored_eval(run_dir: Path, bench: str, *, below: int | None = None, exactly: int | None = None,
                engine_dtype: str | None = None) -> tuple[EvalResult, list[EvalRow]] | None:
    """The newest eval of ``bench`` in a cycle before ``below`` (or in cycle ``exactly``), with its rows;
    with ``engine_dtype``, only an eval whose engine computed in that dtype."""
    candidates = [r for r in efficacy(run_dir, bench)
                  if (below is None or r.cycle < below) and (exactly is None or r.cycle == exactly)
                  and (engine_dtype is None or r.engine_dtype == engine_dtype)]
    if not candidates:
        return None
    result = candidates[-1]
    folder = Path(run_dir) / "evals" / bench / result.key
    shards = sorted(folder.glob("greedy-*.parquet"))
    return (result, read_parquet(shards, EvalRow)) if shards else None


def _vs(p: Paired | None) -> str:
    if p is None:
        return "-"
    return f"{p.diff:+.3f} ± {p.paired_se:.3f} (+{p.gained}/-{p.lost}, McNemar p={p.mcnemar_p:.3g})"


def cycle_scalars(result: EvalResult) -> dict[str, float]:
    """The cycle's point on the run's TensorBoard curve: pass@1, its SE, the paired gains, and for each
    task family the share of its requests the router sent to that family's own specialist."""
    tag = f"eval/{result.bench}"
    out = {f"{tag}/pass@1": result.pass_at_1, f"{tag}/se": result.se}
    for name, p in (("vs_previous", result.vs_previous), ("vs_cycle0", result.vs_cycle0)):
        if p is not None:
            out[f"{tag}/{name}"] = p.diff
    for family, shares in result.routing.items():
        out[f"{tag}/routing/{family}"] = shares.get(family, 0.0)
    return out


def efficacy_rows(results: Sequence[EvalResult]) -> list[dict[str, object]]:
    """One row a cycle: the efficacy table of the artifacts and of ``mindforge status``."""
    return [{"cycle": r.cycle, "bench": r.bench + (f" ({r.subset})" if r.subset else ""), "n": r.n,
             "pass@1": round(r.pass_at_1, 4), "se": round(r.se, 4), "vs previous cycle": _vs(r.vs_previous),
             "vs cycle 0": _vs(r.vs_cycle0), "routing": "; ".join(routing_words(r)), "hcp": r.hcp}
            for r in results]


def efficacy_cell(ev: dict[str, Any]) -> str:
    """pass@1 ± SE, and the paired change against the previous cycle and cycle 0."""
    if not ev:
        return "not evaluated (eval not among the stages)"
    cell = f"{ev['bench']} pass@1 {ev['pass@1']:.3f} ± {ev['se']:.3f} (n={ev['n']})"
    for name, key in (("previous", "vs_previous"), ("cycle 0", "vs_cycle0")):
        if ev.get(key):
            p = ev[key]
            cell += f"; vs {name} {p['diff']:+.3f} ± {p['paired_se']:.3f} (McNemar p={p['mcnemar_p']:.3g})"
    return cell + (f"; {ev['subset']}" if ev.get("subset") else "")
