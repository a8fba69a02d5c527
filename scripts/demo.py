"""`make demo` and `make efficacy`: RSI cycles on the embedded default, through Prefect, then a summary.

`make demo` runs one cycle of the ``rsi-cycle/embedded`` deployment on
``runs/demo``; `make efficacy RUN=DIR` runs the ``rsi-cycle/efficacy``
deployment (three cycles, the sealed eval before and after each) on DIR and
ends with ``mindforge status DIR``. ``--deployment``, ``--run-dir`` and
``--cycles`` choose.

Steps (``make demo`` has already run ``make setup``):

1. the parts are checked: a stage that is not built is named and the demo
   stops with status 3 (nothing is simulated);
2. services: ``mindforge up --only prefect`` (reused when running); the
   cycle starts the embedded engine itself, on the run's own adapters;
3. ``prefect work-pool create mindforge --type process`` with a
   concurrency limit of 1 (a cycle's engine and trainer take about 15 GB:
   two at once exhaust this machine), ``prefect --no-prompt deploy --all``
   from prefect.yaml, a worker on the ``default`` queue (a nightly run of
   ``rsi-cycle/scheduled``, on its own queue, never starts beside the demo);
4. ``prefect deployment run 'rsi-cycle/<deployment>' --watch`` on the run
   directory (each demo runs that run's next cycles);
5. each cycle's summary: tasks accepted, HCP change, adapter version,
   validation before and after, and the UI address of the run's artifacts.

The worker is stopped at the end; the Prefect server keeps running so the UI
stays open (``mindforge down`` stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
MF, PREFECT = str(BIN / "mindforge"), str(BIN / "prefect")
PARTS = (
    ("embedded engine (mindforge engine serve)", ["engine", "serve"], 4),
    ("router harness and proxy (mindforge serve)", ["serve"], 4),
    ("Discovery stage (mindforge discover)", ["discover"], 5),
    ("Expansion stage (mindforge expand)", ["expand"], 6),
    ("Update stage (mindforge update)", ["update"], 7),
    ("RSI cycle (mindforge cycle)", ["cycle"], 8),
)


def step(title: str, argv: list[str], env: dict[str, str] | None = None, ok_codes: tuple[int, ...] = (0,)) -> bool:
    print(f"\n== {title}\n$ {' '.join(argv)}", flush=True)
    t = time.monotonic()
    code = subprocess.run(argv, cwd=REPO, env=env, check=False).returncode
    ok = code in ok_codes
    print(f"-- {'ok' if ok else f'FAILED (exit {code})'} in {time.monotonic() - t:.1f}s", flush=True)
    return ok


def built(command: list[str]) -> bool:
    from typer.main import get_command

    from mindforge.cli import app

    group = get_command(app)
    for name in command:
        commands = getattr(group, "commands", {})
        if name not in commands:
            return False
        group = commands[name]
    return True


def missing_parts() -> list[str]:
    out = [f"{name} (issue {issue})" for name, command, issue in PARTS if not built(command)]
    if not (REPO / "mindforge" / "flows" / "discovery.py").exists():
        out.append("Discovery flow mindforge/flows/discovery.py (issue 5)")
    return out


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        return subprocess.Popen([PREFECT, "worker", "start", "--pool", "mindforge", "--work-queue", "default"],
                                cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    from mindforge.services import stop_process_group

    stop_process_group(proc.pid, timeout=30)


def deployment_params(name: str) -> dict:
    """The ``params`` a deployment of prefect.yaml declares: `--params` replaces them whole, so the demo
    passes them on with its own run directory (otherwise the cycle would run at full-size defaults)."""
    import yaml

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    found = next(d for d in spec["deployments"] if d["name"] == name)
    return dict(found["parameters"]["params"])


def flow_run_id(text: str) -> str | None:
    for line in text.splitlines():
        if "UUID:" in line:
            return line.split("UUID:", 1)[1].strip()
    return None


def print_summary(run_dir: Path, cycle: int, ui: str, run_id: str | None) -> None:
    from mindforge.eval.report import efficacy_cell

    path = run_dir / "cycles" / str(cycle) / "summary.json"
    s = json.loads(path.read_text())
    val, adapter = s["validation"], s["adapter"]
    print(f"\n== Cycle {cycle} of {run_dir}")
    print(f"tasks accepted:     {s['tasks_accepted']} {s['tasks_by_family']} (archive {s['archive_tasks']})")
    print(f"HCP:                {s['hcp_start']} -> {s['hcp_best']} (Expansion) -> {s['hcp_after']} (Update)")
    print(f"Expansion changed:  {', '.join(s['hcp_changed_paths']) or 'none'}")
    print(f"adapter:            {adapter.get('version')} ({'promoted' if adapter.get('promoted') else 'kept'}"
          f"{'' if adapter.get('promoted') else ': ' + str(adapter.get('reason'))})")
    print(f"validation:         before {val.get('reward_before')} -> after {val.get('reward_after')} "
          f"(paired SE {val.get('se')}, {val.get('validation_tasks')} tasks)")
    print(f"efficacy:           {efficacy_cell(s.get('eval') or {})}")
    print("stages:             " + ", ".join(f"{k} {v['status']} {v['seconds']:.0f}s" for k, v in s["stages"].items()))
    print(f"\nPrefect UI:         {ui}")
    if run_id:
        print(f"this run:           {ui}/runs/flow-run/{run_id}  (Artifacts tab: cycle-{cycle}-efficacy, cycle-{cycle}-hcp-diff, "
              f"cycle-{cycle}-expansion-trajectories, cycle-{cycle}-summary)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", default="embedded", help="rsi-cycle deployment of prefect.yaml")
    ap.add_argument("--run-dir", type=Path, default=REPO / "runs" / "demo")
    ap.add_argument("--cycles", type=int, default=None, help="cycles to run (default: the deployment's)")
    ap.add_argument("--status", action="store_true", help="end with `mindforge status RUN_DIR`")
    ap.add_argument("--complete", action="store_true",
                    help="run only the cycles the run lacks of the deployment's count (a rerun resumes, "
                         "a finished run only reports)")
    return ap.parse_args(argv)


def main() -> int:
    args = parse_args()
    run_dir = args.run_dir if args.run_dir.is_absolute() else (Path.cwd() / args.run_dir).resolve()
    t0 = time.monotonic()
    missing = missing_parts()
    if missing:
        print("The full RSI cycle cannot run yet. Not built:")
        for name in missing:
            print(f"  - {name}")
        print("Nothing was simulated. `mindforge cycle --stage expansion --stage update` runs the built stages.")
        return 3
    from mindforge.cycle import next_cycle
    from mindforge.settings import load_settings

    settings = load_settings()
    env = {**os.environ, "PREFECT_API_URL": settings.prefect_api_url, "MINDFORGE_REPO": str(REPO),
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if not step("Prefect server", [MF, "up", "--only", "prefect"], env):
        return 1
    step("Work pool 'mindforge' (process)", [PREFECT, "work-pool", "create", "mindforge", "--type", "process"],
         env, ok_codes=(0, 1))  # 1: it exists already
    if not step("One flow run at a time on it", [PREFECT, "work-pool", "set-concurrency-limit", "mindforge", "1"], env):
        return 1
    if not step("Deployments from prefect.yaml", [PREFECT, "--no-prompt", "deploy", "--all"], env):
        return 1
    first = next_cycle(run_dir)
    spec = deployment_params(args.deployment)
    cycles = args.cycles or int(spec.get("cycles", 1))
    if args.complete:
        cycles -= first - 1
    if cycles <= 0:
        print(f"\n{run_dir} has its {first - 1} cycle(s) already", flush=True)
        return 0 if not args.status or step(f"Status of {run_dir}", [MF, "status", str(run_dir)], env) else 1
    worker = start_worker(env, settings.services_dir / "demo-worker.log")
    params = json.dumps({"params": {**spec, "run_dir": str(run_dir), "cycles": cycles}})
    argv = [PREFECT, "deployment", "run", f"rsi-cycle/{args.deployment}", "--params", params, "--watch",
            "--watch-timeout", str(7200 * cycles)]
    print(f"\n== {cycles} RSI cycle(s) through Prefect (from cycle {first})\n$ {' '.join(argv)}", flush=True)
    try:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    finally:
        stop(worker)
    print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
    ui = f"http://{settings.host}:{settings.prefect_port}"
    run_id = flow_run_id(done.stdout + done.stderr)
    finished = [c for c in range(first, first + cycles) if (run_dir / "cycles" / str(c) / "summary.json").exists()]
    for cycle in finished:
        print_summary(run_dir, cycle, ui, run_id)
    if args.status:
        step(f"Status of {run_dir}", [MF, "status", str(run_dir)], env)
    if len(finished) < cycles:
        print(f"{cycles - len(finished)} cycle(s) did not finish; rerun the same command to resume. Worker log: "
              f"{settings.services_dir / 'demo-worker.log'}; UI: {ui}")
        return 1
    print(f"\n{time.monotonic() - t0:.0f}s for {cycles} cycle(s) and the services (setup ran before)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
