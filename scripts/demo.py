"""`make demo`: one full RSI cycle on the embedded default, through Prefect, then a summary.

Steps (``make demo`` has already run ``make setup``):

1. the parts are checked: a stage that is not built is named and the demo
   stops with status 3 (nothing is simulated);
2. services: ``mindforge up --only prefect`` (reused when running); the
   cycle starts the embedded engine itself, on the run's own adapters;
3. ``prefect work-pool create mindforge --type process``,
   ``prefect --no-prompt deploy --all`` from prefect.yaml, a worker;
4. ``prefect deployment run 'rsi-cycle/embedded' --watch`` on ``runs/demo``
   (each demo runs that run's next cycle);
5. the cycle's summary: tasks accepted, HCP change, adapter version,
   validation before and after, and the UI address of the run's artifacts.

The worker is stopped at the end; the Prefect server keeps running so the UI
stays open (``mindforge down`` stops it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
MF, PREFECT = str(BIN / "mindforge"), str(BIN / "prefect")
RUN_DIR = REPO / "runs" / "demo"
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
    if not (REPO / "flows" / "discovery.py").exists():
        out.append("Discovery flow flows/discovery.py (issue 5)")
    return out


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        return subprocess.Popen([PREFECT, "worker", "start", "--pool", "mindforge"], cwd=REPO, env=env,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


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


def print_summary(cycle: int, ui: str, run_id: str | None) -> None:
    from mindforge.eval.report import efficacy_cell

    path = RUN_DIR / "cycles" / str(cycle) / "summary.json"
    s = json.loads(path.read_text())
    val, adapter = s["validation"], s["adapter"]
    print(f"\n== Cycle {cycle} of {RUN_DIR}")
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


def main() -> int:
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
    if not step("Deployments from prefect.yaml", [PREFECT, "--no-prompt", "deploy", "--all"], env):
        return 1
    worker = start_worker(env, settings.services_dir / "demo-worker.log")
    cycle = next_cycle(RUN_DIR)
    params = json.dumps({"params": {**deployment_params("embedded"), "run_dir": str(RUN_DIR), "cycles": 1}})
    argv = [PREFECT, "deployment", "run", "rsi-cycle/embedded", "--params", params, "--watch",
            "--watch-timeout", "7200"]
    print(f"\n== One RSI cycle through Prefect (cycle {cycle})\n$ {' '.join(argv)}", flush=True)
    try:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    finally:
        stop(worker)
    print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
    ui = f"http://{settings.host}:{settings.prefect_port}"
    if not (RUN_DIR / "cycles" / str(cycle) / "summary.json").exists():
        print(f"the cycle did not finish; rerun `make demo` to resume it. Worker log: "
              f"{settings.services_dir / 'demo-worker.log'}; UI: {ui}")
        return 1
    print_summary(cycle, ui, flow_run_id(done.stdout + done.stderr))
    print(f"\nmake demo: {time.monotonic() - t0:.0f}s for the cycle and the services (setup ran before)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
