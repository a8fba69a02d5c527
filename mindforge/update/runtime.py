"""Live services for ``run_update``: engine, sandbox pool, harness, policy, trainer.

``open_services(config, settings)`` is a context manager. It reuses a
healthy engine (``settings.engine_url``, else the local one ``mindforge up``
starts) and otherwise starts the embedded engine on the default model with
the HCP's served adapters; it always opens its own sandbox pool. What it
started it stops on exit, also on error.

The adapters an engine must serve come from the run's catalog
(``RUN_DIR/adapters``). On first use the catalog is empty: fresh L0–L3
adapters are created for the base model (``mindforge model init-adapters``)
and stored as version 0 of each route, which is what the default HCP's
``mf-L<n>-v0000`` names refer to.

Training needs the base model's weights on this machine as well (the
policy is trained here, in fp32), even when the engine runs elsewhere; the
parity probe is what proves the two hold the same weights.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from mindforge.errors import MindForgeError
from mindforge.hcp import load_hcp
from mindforge.settings import Settings
from mindforge.store import RunDir
from mindforge.update.catalog import AdapterCatalog, copy_adapter
from mindforge.update.handoff import EngineAdmin
from mindforge.update.inputs import current_hcp_path
from mindforge.update.policy import load_policy
from mindforge.update.stage import UpdateConfig, UpdateServices


class MissingPart(MindForgeError):
    pass


def need(module: str) -> Any:
    """Import a part another package provides, or say plainly which part is missing."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPart(f"{module} is needed by `mindforge update` and is not importable: {exc}") from None


def catalog_for(run_dir: Path) -> AdapterCatalog:
    return AdapterCatalog(Path(run_dir) / "adapters")


def ensure_initial_adapters(catalog: AdapterCatalog, doc: dict[str, Any], model_path: Path) -> list[str]:
    """Store fresh adapters as version 0 of each route the catalog lacks; returns the names added."""
    missing = [r for r, spec in doc["router"]["routes"].items() if not catalog.versions(r)]
    if not missing:
        return []
    init_adapters = need("mindforge.engine.registry").init_adapters  # `mindforge model init-adapters`

    added = []
    with tempfile.TemporaryDirectory(prefix="mf-init-adapters-") as tmp:
        folders = init_adapters(model_path, Path(tmp), routes=missing)
        for route in missing:
            prefix = doc["router"]["routes"][route]["adapter"]
            entry = catalog.save(route, copy_adapter(Path(folders[route])), prefix=prefix,
                                 base_model=str(model_path))
            added.append(entry.name)
    return added


def served_adapters(catalog: AdapterCatalog, doc: dict[str, Any]) -> dict[str, Path]:
    """Engine name -> folder, for every adapter the HCP serves."""
    out: dict[str, Path] = {}
    for route, spec in doc["router"]["routes"].items():
        entry = catalog.find(spec["served_adapter"])
        if entry is None:
            raise MissingPart(f"the HCP serves {spec['served_adapter']} for {route}, which the catalog "
                              f"{catalog.root} does not hold")
        out[entry.name] = entry.path
    return out


def running_engine(settings: Settings) -> str | None:
    """The URL of a healthy engine, if one answers."""
    from mindforge.services import healthy

    for url in filter(None, (settings.engine_url, settings.local_engine_url)):
        if healthy(url.rstrip("/") + "/health"):
            return url.rstrip("/")
    return None


@contextmanager
def open_services(
    config: UpdateConfig, settings: Settings,
    progress: Callable[[int, int, Any], None] | None = None,
) -> Iterator[UpdateServices]:
    from mindforge.sandbox import SandboxConfig, SandboxPool

    resolve_model = need("mindforge.engine.registry").resolve_model

    hcp = load_hcp(current_hcp_path(RunDir(config.run_dir), config.cycle, config.hcp))
    doc = hcp.to_document()
    model_path = Path(resolve_model(settings.model, settings))
    catalog = catalog_for(config.run_dir)
    ensure_initial_adapters(catalog, doc, model_path)
    adapters = served_adapters(catalog, doc)
    with ExitStack() as stack:
        url = running_engine(settings)
        if url is None:
            url = stack.enter_context(_embedded_engine(model_path, adapters))
        engine = EngineAdmin(url, api_key=settings.api_key)
        stack.callback(engine.close)
        loaded = set(engine.loaded())
        for name, path in adapters.items():
            if name not in loaded:
                engine.load(name, path)
        verifier = hcp.guarded.verifier
        pool = stack.enter_context(SandboxPool(SandboxConfig(
            pool_size=settings.sandbox_pool_size, test_timeout_s=verifier.test_timeout_s)))
        yield UpdateServices(
            engine=engine, verifier=pool, runner_for=_runner_factory(url, model_path, settings),
            open_session=pool.session, catalog=catalog,
            load_policy=lambda entry: load_policy(model_path, entry.path, seed=config.seed),
            make_trainer=_make_trainer, render_probe=_probe_renderer(model_path),
            base_model=str(model_path), hcp_doc=doc, progress=progress,
        )


@contextmanager
def _embedded_engine(model_path: Path, adapters: dict[str, Path]) -> Iterator[str]:
    proc = need("mindforge.engine").EngineProcess(model_path, adapters, port=0)
    with proc:
        yield proc.url


def _make_trainer(policy: Any, fields: dict[str, Any]) -> Any:
    trainer = need("mindforge.update.trainer")
    return trainer.GRPOTrainer(policy, trainer.GRPOConfig(**fields))


def _runner_factory(url: str, model_path: Path, settings: Settings) -> Callable[..., Any]:
    """(HCP document, max_tokens, route pin) -> the production harness's turn runner against ``url``."""
    harness = need("mindforge.harness")
    from mindforge.hcp import parse_hcp

    client = harness.EngineClient(url, api_key=settings.api_key)  # one client: its pools are per event loop

    def runner_for(doc: dict[str, Any], max_tokens: int | None, route: str | None = None) -> Any:
        h = harness.open_harness(parse_hcp(doc, "hcp"), url, model_path, settings, client=client)
        return harness.task_runner(h, max_tokens=max_tokens, route=route)

    return runner_for


def _probe_renderer(model_path: Path) -> Callable[[dict[str, Any], str, Any], list[int]]:
    """(HCP document, route, task) -> the ids the harness sends for the task's first answer on ``route``."""
    harness = need("mindforge.harness")
    from mindforge.hcp import parse_hcp

    def render(doc: dict[str, Any], route: str, task: Any) -> list[int]:
        h = harness.Harness(parse_hcp(doc, "hcp"), None, harness.renderer_for(model_path))
        return harness.probe_prompt_ids(h, route, task)

    return render
