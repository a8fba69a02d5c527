"""Live services for ``run_update``, built from the run's services: sandbox, harness, policy, trainer.

``open_services(run, config)`` is a context manager. The engine and the
adapter catalog are the run's (``mindforge.run_services``): the engine is
made to serve every adapter the starting HCP names, and the sandbox pool
gets that HCP's guarded limits. The pool is removed on exit, also on error.

Training needs the base model's weights on this machine as well (the
policy is trained here, in fp32), even when the engine runs elsewhere; the
parity probe is what proves the two hold the same weights.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from mindforge.harness import Harness, probe_prompt_ids, renderer_for, task_runner
from mindforge.hcp import load_hcp, parse_hcp
from mindforge.run_services import RunServices
from mindforge.sandbox import SandboxPool
from mindforge.settings import ENGINE_MAX_BATCH
from mindforge.store import RunDir
from mindforge.tasks.benchmarks import SealedSet
from mindforge.update.inputs import current_hcp_path
from mindforge.update.stage import UpdateConfig, UpdateServices


@contextmanager
def open_services(run: RunServices, config: UpdateConfig, progress: Callable[[int, int, Any], None] | None = None,
                  log: Callable[[str], None] = lambda message: None) -> Iterator[UpdateServices]:
    from mindforge.update.policy import load_policy  # torch: only once a stage really trains

    hcp = load_hcp(current_hcp_path(RunDir(config.run_dir), config.cycle, config.hcp))
    doc = hcp.to_document()
    run.serve(doc)
    with ExitStack() as stack:
        engine = run.admin()
        stack.callback(engine.close)
        pool = stack.enter_context(SandboxPool(run.sandbox(hcp)))
        client = run.engine_client()  # one client: its pools are per event loop
        yield UpdateServices(
            engine=engine, verifier=pool, runner_for=_runner_factory(run, client), open_session=pool.session,
            catalog=run.catalog, load_policy=lambda entry: load_policy(run.model_path, entry.path, seed=config.seed),
            make_trainer=_make_trainer, render_probe=_probe_renderer(run.model_path),
            base_model=str(run.model_path), hcp_doc=doc, progress=progress,
            sealed=SealedSet.of(run.settings.cache_dir), routes_of=_router(run, client),
            render_route=_route_renderer(run.model_path), log=log,
        )


def _make_trainer(policy: Any, fields: dict[str, Any]) -> Any:
    from mindforge.update.trainer import GRPOConfig, GRPOTrainer

    return GRPOTrainer(policy, GRPOConfig(**fields))


def _runner_factory(run: RunServices, client: Any) -> Callable[..., Any]:
    """(HCP document, max_tokens, route pin) -> the production harness's turn runner on the run's engine."""

    def runner_for(doc: dict[str, Any], max_tokens: int | None, route: str | None = None) -> Any:
        return task_runner(run.harness(parse_hcp(doc, "hcp"), client), max_tokens=max_tokens, route=route)

    return runner_for


def _probe_renderer(model_path: Path) -> Callable[[dict[str, Any], str, Any], list[int]]:
    """(HCP document, route, task) -> the ids the harness sends for the task's first answer on ``route``."""

    def render(doc: dict[str, Any], route: str, task: Any) -> list[int]:
        return probe_prompt_ids(Harness(parse_hcp(doc, "hcp"), None, renderer_for(model_path)), route, task)

    return render


def _router(run: RunServices, client: Any, concurrency: int = ENGINE_MAX_BATCH) -> Callable[[dict[str, Any], Any], list[str]]:
    """(HCP document, tasks) -> the route the production router picks for each task, on the run's engine."""

    def routes(doc: dict[str, Any], tasks: Any) -> list[str]:
        harness = run.harness(parse_hcp(doc, "hcp"), client)
        gate = asyncio.Semaphore(concurrency)

        async def one(task: Any) -> str:
            async with gate:
                return (await harness.route_request(task.prompt)).route

        async def every() -> list[str]:
            return list(await asyncio.gather(*(one(t) for t in tasks)))

        return asyncio.run(every())

    return routes


def _route_renderer(model_path: Path) -> Callable[[dict[str, Any], Any, str], tuple[list[int], tuple[int, ...]]]:
    """(HCP document, task, label) -> the route hop's prompt ids for the task and the ids of ``label``."""

    def render(doc: dict[str, Any], task: Any, label: str) -> tuple[list[int], tuple[int, ...]]:
        harness = Harness(parse_hcp(doc, "hcp"), None, renderer_for(model_path))
        return harness.route_prompt_ids(task.prompt), harness.label_ids(label)

    return render
