"""One real RSI cycle through a real Prefect deployment, shared by the end-to-end and browser tests.

A Prefect server (own PREFECT_HOME and port), the ``mindforge`` process work
pool, ``prefect deploy --all`` from prefect.yaml, a worker, then
``prefect deployment run 'rsi-cycle/embedded'`` with small parameters on the
embedded default. The run happens once a test session; both test modules get
the same result (the module-level cache), and the stack stops at session end.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
from helpers import REPO, require
from prefect_stack import PrefectStack

PARAMS = {
    "cycles": 1,
    "stages": ["discovery", "expansion", "update", "eval"],
    # Verified tasks without the difficulty measurement: the CPU test keeps Discovery's proposers and
    # sandbox checks, and Expansion gets enough tasks whatever the tiny model solves.
    "discovery": {"budget": 6, "measure_difficulty": False},
    "expansion": {"budget": 1, "max_tasks": 3, "samples": 1, "patience": 1, "minibatch": 1,
                  "proposers": ["numeric"]},
    # Router training and rejection sampling run for real, at the smallest sizes that exercise them.
    "update": {"steps": 1, "group_size": 2, "batch_tasks": 1, "validation_tasks": 1, "validation_samples": 1,
               "max_tokens": 64, "rft": {"attempts": 2, "max_tasks": 2, "epochs": 1},
               "router": {"train_per_family": 2, "validation_per_family": 1, "epochs": 1}},
    # The sealed eval after the cycle and the cycle-0 baseline, on a small fixed subset of MBPP.
    "eval": {"max_tasks": 16},
}
_CACHE: dict[str, Any] = {}


def _module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def stages_built(stages: tuple[str, ...] = ("discovery", "expansion", "update")) -> list[str]:
    """What running these stages for real still lacks (empty when they can all run)."""
    need = ["mindforge.engine.launch", "mindforge.harness.harness", "mindforge.harness.tasks"]
    if "discovery" in stages:
        need += ["mindforge.discovery.stage", "mindforge.discovery.runtime", "mindforge.flows.discovery"]
    return [m for m in need if not _module(m)]


def _docker_ok() -> bool:
    import subprocess

    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, check=False).returncode == 0


class DeployedRun:
    def __init__(self, stack: PrefectStack, run_dir: Path, flow_run_id: str):
        self.stack, self.run_dir, self.flow_run_id = stack, run_dir, flow_run_id
        self.seconds = 0.0
        self.output = ""

    @property
    def ui_url(self) -> str:
        return self.stack.api_url.removesuffix("/api")

    def api(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, f"{self.stack.api_url}{path}", json=body, timeout=30)
        r.raise_for_status()
        return r.json()

    def artifacts(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        found = self.api("POST", "/artifacts/filter", {"artifacts": {"key": {"any_": keys}}})
        return {a["key"]: a for a in found}


def _flow_run_id(output: str) -> str:
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:", 1)[1].strip()
    raise AssertionError(f"no flow run id in `prefect deployment run` output:\n{output}")


def deploy_stack(base: Path) -> PrefectStack:
    """A server, the ``mindforge`` process pool, ``prefect deploy --all`` from prefect.yaml, a worker."""
    stack = PrefectStack(base / "prefect")
    stack.start_server()
    env = {"MINDFORGE_REPO": str(REPO)}
    try:
        for args in (("work-pool", "create", "mindforge", "--type", "process"),
                     ("work-pool", "set-concurrency-limit", "mindforge", "1"), ("--no-prompt", "deploy", "--all")):
            done = stack.run(*args, cwd=REPO, extra_env=env)
            assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        # as `make demo` does: the nightly deployment's queue is left alone (a run due mid-test never starts)
        stack.start_worker("mindforge", cwd=REPO, extra_env=env, queue="default")
    except BaseException:
        stack.stop()
        raise
    return stack


def kill_leftovers(api_url: str) -> list[int]:
    """Processes that still talk to this test server (a flow run's engine lives in its own process group)."""
    import os
    import signal

    marker = f"PREFECT_API_URL={api_url}".encode()
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return killed


def deployed_run(base: Path) -> DeployedRun:
    """Start everything and run the cycle once (cached for the session).

    ``base`` should be outside pytest's basetemp: concurrent pytest sessions
    on the machine prune old basetemps, and this run takes long.
    """
    if "run" in _CACHE:
        return _CACHE["run"]
    missing = stages_built()
    require(not missing, f"the full cycle needs parts not built yet: {', '.join(missing)}")
    require(_docker_ok(), "Docker engine not reachable")
    stack = deploy_stack(base)
    _CACHE["stack"] = stack
    env = {"MINDFORGE_REPO": str(REPO)}
    run_dir = base / "run"
    params = json.dumps({"params": {**PARAMS, "run_dir": str(run_dir)}})
    t0 = time.monotonic()
    done = stack.run("deployment", "run", "rsi-cycle/embedded", "--params", params, "--watch",
                     "--watch-timeout", "3000", cwd=REPO, extra_env=env, timeout=3300)
    run = DeployedRun(stack, run_dir, _flow_run_id(done.stdout + done.stderr))
    run.seconds = time.monotonic() - t0
    run.output = done.stdout + done.stderr
    _CACHE["run"] = run
    return run


def stop() -> None:
    stack = _CACHE.pop("stack", None)
    _CACHE.pop("run", None)
    if stack is not None:
        stack.stop()
        kill_leftovers(stack.api_url)
    base = _CACHE.pop("base", None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


def private_base() -> Path:
    """A folder of this session's own, outside pytest's basetemp (removed by ``stop``)."""
    import tempfile

    if "base" not in _CACHE:
        _CACHE["base"] = Path(tempfile.mkdtemp(prefix="mf-e2e-cycle-"))
    return _CACHE["base"]
