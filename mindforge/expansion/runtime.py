"""The live services Expansion runs on, found or started, and stopped afterwards.

``open_services(settings, config)`` yields ``ExpansionServices`` whose solver
goes through the production harness to an engine and verifies in the sandbox:

- engine: ``settings.engine_url`` when it answers ``/health``; else the local
  engine ``mindforge up`` started (``settings.local_engine_url``); else the
  embedded engine on the default model, started here with fresh adapters
  (``init-adapters``) in a temporary folder, and stopped on exit;
- sandbox: a warm ``SandboxPool`` of ``settings.sandbox_pool_size`` containers,
  removed on exit.

Everything started here is stopped when the block ends, also on errors and
Ctrl-C, so ``mindforge expand`` leaves a machine as it found it.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.proposers import Proposer
from mindforge.expansion.stage import ExpansionServices
from mindforge.services import healthy
from mindforge.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running_engine(settings: Settings) -> str | None:
    """The URL of an engine that answers now, if any (configured first, then ``mindforge up``'s)."""
    for url in (settings.engine_url, settings.local_engine_url):
        if url and healthy(url.rstrip("/") + "/health"):
            return url.rstrip("/")
    return None


def start_embedded_engine(settings: Settings, stack: ExitStack, log: Callable[[str], None]) -> str:
    """Start the embedded engine on the default model with fresh adapters; stopped with ``stack``."""
    from mindforge.engine.launch import EngineProcess, init_adapters

    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mf-expand-adapters-")))
    adapters = init_adapters(settings.model, folder, settings=settings)
    log(f"no engine running; starting the embedded engine on {settings.model}")
    proc = stack.enter_context(EngineProcess(settings.model, adapters, port=free_port(), settings=settings))
    log(f"embedded engine up at {proc.url}")
    return proc.url


@contextmanager
def open_services(settings: Settings, config: ExpansionConfig, log: Callable[[str], None] = print,
                  proposers: Sequence[Proposer] | None = None) -> Iterator[ExpansionServices]:
    from mindforge.expansion.harness_io import HarnessReflector, harness_runner_for
    from mindforge.expansion.solve import HarnessSolver
    from mindforge.sandbox import SandboxConfig, SandboxPool

    with ExitStack() as stack:
        url = running_engine(settings)
        if url is None:
            url = start_embedded_engine(settings, stack, log)
        else:
            log(f"using the engine at {url}")
        pool = stack.enter_context(SandboxPool(SandboxConfig(pool_size=settings.sandbox_pool_size)))
        runner_for, close = harness_runner_for(url, settings)
        stack.callback(close)
        solver = HarnessSolver(runner_for, pool, open_session=pool.session)
        yield ExpansionServices(solver=solver, reflector=HarnessReflector(runner_for), proposers=proposers,
                                log=log)
