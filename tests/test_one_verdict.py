"""One verdict everywhere: every stage judges with the sandbox the HCP's guarded section describes.

Each stage's own ``open_services`` is opened on the same run services (a real
embedded engine, the run's catalog, real Docker); the pools they build are
given the same candidates. Before the run services existed, Update judged
with a 10 s test timeout and no rerun, Expansion with 5 s and one rerun,
Discovery with 5 s and none: a test that takes 7 s passed in Update and
failed elsewhere. Now each pool's config is the HCP's, and so are its verdicts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import require

from mindforge.hcp import load_hcp
from mindforge.paths import default_hcp_path, seed_tasks_dir
from mindforge.sandbox.config import sandbox_config
from mindforge.settings import load_settings
from mindforge.tasks.io import load_tasks
from mindforge.tasks.models import Task, VerdictStatus

pytestmark = [pytest.mark.docker, pytest.mark.model]

SLOW = Task(family="L2", prompt="Write slow_add(a, b).", output_kind="function", entry_point="slow_add",
            tests=[{"name": "slow", "code": "import time\ntime.sleep(7)\nassert slow_add(1, 2) == 3"}],
            reference="def slow_add(a, b):\n    return a + b")


def _docker_ok() -> bool:
    return subprocess.run(["docker", "info"], check=False, capture_output=True).returncode == 0


def _candidates() -> list[tuple[Task, str]]:
    seed = next(t for t in load_tasks(seed_tasks_dir()) if t.output_kind == "function")
    return [(SLOW, SLOW.reference), (SLOW, "def slow_add(a, b):\n    return a - b"),
            (seed, seed.reference), (seed, "def nothing():\n    return None")]


def _stage_pools(run, run_dir: Path, stack) -> dict[str, object]:
    from mindforge.discovery.config import DiscoveryConfig
    from mindforge.discovery.runtime import open_services as open_discovery
    from mindforge.expansion.config import ExpansionConfig
    from mindforge.expansion.runtime import open_services as open_expansion
    from mindforge.update.runtime import open_services as open_update
    from mindforge.update.stage import UpdateConfig

    discovery = stack.enter_context(open_discovery(
        run, DiscoveryConfig(run_dir=run_dir, cycle=1, measure_difficulty=False, proposers=("procedural",)),
        log=lambda m: None))
    expansion = stack.enter_context(open_expansion(run, ExpansionConfig(run_dir=run_dir, cycle=1),
                                                   log=lambda m: None))
    update = stack.enter_context(open_update(run, UpdateConfig(run_dir=run_dir, cycle=1)))
    return {"discovery": discovery.verifier, "expansion": expansion.solver.solver.pool, "update": update.verifier}


def test_every_stage_judges_with_the_hcps_sandbox(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from mindforge.run_services import open_run_services

    require(_docker_ok(), "Docker engine not running")
    settings = load_settings().model_copy(update={"engine_url": None, "engine_port": 9})
    hcp = load_hcp(default_hcp_path())
    want = sandbox_config(hcp.guarded, pool_size=settings.sandbox_pool_size)
    assert want.test_timeout_s == 10 and want.reruns == 1 and want.memory == "256m"
    with open_run_services(settings, tmp_path, 1) as run, ExitStack() as stack:
        pools = _stage_pools(run, tmp_path, stack)
        assert {name: p.config for name, p in pools.items()} == dict.fromkeys(pools, want)
        verdicts = {name: [v.status for v in p.verify_many(_candidates())] for name, p in pools.items()}
    expected = [VerdictStatus.PASS, VerdictStatus.FAIL, VerdictStatus.PASS, VerdictStatus.FAIL]
    assert verdicts == dict.fromkeys(pools, expected), verdicts


def test_the_hcps_guarded_limits_reach_the_containers(tmp_path: Path) -> None:
    import docker

    from mindforge.sandbox import SandboxPool

    require(_docker_ok(), "Docker engine not running")
    doc = json.loads(default_hcp_path().read_text())
    doc["guarded"]["sandbox"].update(memory_mb=192, pids=48, cpus=0.5)
    doc["guarded"]["verifier"]["test_timeout_s"] = 3
    changed = tmp_path / "tight.hcp.json"
    changed.write_text(json.dumps(doc))
    config = sandbox_config(load_hcp(changed).guarded, pool_size=1)
    with SandboxPool(config) as pool:
        (container,) = pool._all
        host = docker.from_env().api.inspect_container(container.id)["HostConfig"]
        assert host["Memory"] == 192 * 2**20 and host["MemorySwap"] == 192 * 2**20
        assert host["PidsLimit"] == 48 and host["NanoCpus"] == 500_000_000
        # The 7-second test now runs past the HCP's 3-second test timeout.
        assert pool.verify(SLOW, SLOW.reference).status == VerdictStatus.FAIL
