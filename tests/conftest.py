"""Shared fixtures; helpers live in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cycle_run():
    """One real deployed cycle per session (tests/e2e_cycle.py), shared by the e2e and browser tests."""
    from e2e_cycle import deployed_run, private_base, stop

    try:
        yield deployed_run(private_base())
    finally:
        stop()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """vLLM's CPU build, started once for the session by the project's own backend (EngineProcess),
    serving the default HCP's version-0 adapters (fresh: B = 0, so each computes the base model).
    Missing vLLM skips locally and fails under CI (`make setup VLLM=1` installs it)."""
    import time

    from harness_fakes import make_hcp, model_path
    from helpers import require_vllm

    from mindforge.engine import EngineProcess
    from mindforge.engine.registry import init_adapters
    from mindforge.settings import load_settings

    require_vllm()
    hcp = make_hcp()
    folders = init_adapters(model_path(), tmp_path_factory.mktemp("vllm-adapters"))
    adapters = {hcp.served_adapter(r): p for r, p in folders.items()}
    t0 = time.monotonic()
    with EngineProcess("smollm2-135m-instruct", adapters, backend="vllm", settings=load_settings()) as eng:
        print(f"\nvLLM answered /health {time.monotonic() - t0:.1f} s after start")
        yield eng, adapters
