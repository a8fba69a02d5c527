"""`mindforge status RUN_DIR`: what a run holds (cycles, stages, tasks, HCP and adapter versions, scores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mindforge.cli._common import user_errors


def _num(x: Any) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _shares(by_family: dict[str, float] | None) -> str:
    return ", ".join(f"{family} {share:.2f}" for family, share in sorted((by_family or {}).items()))


def _print_human(status: dict[str, Any]) -> None:
    """A few short lines a cycle: the hashes are long, and terminals are narrow."""
    from mindforge.cycle.core import generation_line

    print(f"run {status['run_dir']}")
    _print_curve(status)
    for c in status["cycles"]:
        if c.get("baseline"):
            continue
        d, e, u = (c["stages"][s] for s in ("discovery", "expansion", "update"))
        states = " · ".join(f"{name} {st['state']}" for name, st in c["stages"].items())
        print(f"cycle {c['cycle']} ({'complete' if c['complete'] else 'not complete'}): {states}")
        gens = [f"{name} {generation_line(st['generation'])}" for name, st in c["stages"].items() if st.get("generation")]
        if gens:
            print("  engine: " + "; ".join(gens))
        if d.get("tasks"):
            print(f"  tasks: {d['tasks']} accepted")
        if e.get("start_hcp") or u.get("hcp"):
            print(f"  HCP: {_num(e.get('start_hcp'))} -> {_num(e.get('best_hcp'))} -> {_num(u.get('hcp'))}")
        if e.get("test_start") is not None:
            print(f"  expansion test: {_num(e.get('test_start'))} -> {_num(e.get('test_best'))} "
                  f"({_num(e.get('accepted'))} of {_num(e.get('candidates'))} candidates accepted)")
        if u.get("version"):
            kept = "promoted" if u.get("promoted") else "rolled back"
            print(f"  adapter {u.get('route')}: {u['version']} ({kept}); validation "
                  f"{_num(u.get('reward_before'))} -> {_num(u.get('reward_after'))} (paired SE {_num(u.get('se'))})")
        if u.get("router"):
            r = u["router"]
            line = f"  routing accuracy: {_num(r.get('accuracy_before'))} ({_shares(r.get('before'))})"
            if r.get("trained"):
                line += (f" -> {_num(r.get('accuracy_after'))} ({_shares(r.get('after'))}), "
                         f"{'promoted' if r.get('promoted') else 'kept the old router'}")
            print(line)
        if u.get("rft"):
            f = u["rft"]
            reused = f", and {f['discovery_passes']} of Discovery's" if f.get("discovery_passes") else ""
            print(f"  rejection sampling: {f['passes']}/{f['attempts']} attempts passed on {f['tasks']} tasks{reused}; "
                  f"{f['kept']} answers trained on in {f['steps']} steps")
    print(f"next cycle: {status['next_cycle']}")
    for route, names in status["adapters"].items():
        print(f"adapters {route}: {', '.join(names)}")


def _print_curve(status: dict[str, Any]) -> None:
    """pass@1 on the sealed benchmark by cycle, with the paired comparisons: the number a cycle is judged by."""
    evals = [c["eval"] for c in status["cycles"] if c.get("eval")]
    if not evals:
        print("efficacy: no eval yet (mindforge eval --run-dir RUN --cycle 0 scores the baseline)")
        return
    print("efficacy (greedy pass@1 on the sealed benchmark, ± SE; paired differences ± paired SE):")
    for ev in evals:
        line = f"  cycle {ev['cycle']}: {ev['bench']} {ev['pass@1']:.3f} ± {ev['se']:.3f} (n={ev['n']})"
        for name, key in (("previous", "vs_previous"), ("cycle 0", "vs_cycle0")):
            p = ev.get(key)
            if p:
                line += f"; vs {name} {p['diff']:+.3f} ± {p['paired_se']:.3f} (p={p['mcnemar_p']:.3g})"
        print(line + (f"  [{ev['subset']}]" if ev.get("subset") else ""))
        for fam, shares in ev.get("routing", {}).items():
            spread = ", ".join(f"{share:.0%} to {route}" for route, share in shares.items())
            print(f"    routing of {fam} tasks: {spread}")


@user_errors()
def status(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as one JSON object.")] = False,
) -> None:
    """Summarise a run: cycles, stages, tasks, HCP versions, adapter versions, scores."""
    from mindforge.cycle.status import run_status

    found = run_status(run_dir)
    if as_json:
        print(json.dumps(found))
    else:
        _print_human(found)
