"""The real stage runners, and one engine shared by every stage of a cycle run.

``cycle_engine(settings, run_dir, cycle)`` reuses a healthy engine
(``settings.engine_url``, else the one ``mindforge up`` started) or starts
the embedded engine once for the whole run, serving the run catalog's
adapters that the current HCP names. It yields settings whose
``engine_url`` points at that engine, so each stage's own runtime finds it
healthy and reuses it instead of starting its own; Update's handoff loads a
promoted version into the same engine, and the next cycle serves it.

``library_runners(settings, log)`` maps stage names to the plain library
calls (open the stage's services, run the stage, return its result as JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mindforge.cycle.core import StageRunner
from mindforge.cycle.parts import call_accepting, need
from mindforge.settings import Settings


def current_hcp_path(run_dir: Path, cycle: int) -> Path:
    """The HCP cycle ``cycle`` starts from (what the previous cycles left, else the default)."""
    from mindforge.expansion.config import ExpansionConfig
    from mindforge.expansion.inputs import start_hcp_path

    return start_hcp_path(ExpansionConfig(run_dir=run_dir, cycle=cycle))


@contextmanager
def cycle_engine(settings: Settings, run_dir: Path, cycle: int,
                 log: Callable[[str], None] = lambda m: None) -> Iterator[Settings]:
    from mindforge.hcp import load_hcp
    from mindforge.update.runtime import (
        catalog_for,
        ensure_initial_adapters,
        running_engine,
        served_adapters,
    )

    doc = load_hcp(current_hcp_path(run_dir, cycle)).to_document()
    model_path = Path(need("mindforge.engine.registry", "resolve_model")(settings.model, settings))
    catalog = catalog_for(run_dir)
    added = ensure_initial_adapters(catalog, doc, model_path)
    if added:
        log(f"adapter catalog started with {', '.join(added)}")
    url = running_engine(settings)
    if url is not None:
        log(f"using the engine at {url}")
        load_missing(url, settings, served_adapters(catalog, doc), log)
        yield settings.model_copy(update={"engine_url": url})
        return
    engine_cls = need("mindforge.engine", "EngineProcess")
    log(f"starting the embedded engine on {settings.model}")
    with engine_cls(model_path, served_adapters(catalog, doc), port=0, settings=settings,
                    log_path=Path(run_dir) / "engine.log") as proc:
        log(f"embedded engine up at {proc.url}")
        yield settings.model_copy(update={"engine_url": proc.url})


def load_missing(url: str, settings: Settings, adapters: dict[str, Path], log: Callable[[str], None]) -> None:
    """Load the run's served adapters an engine we did not start lacks (Expansion serves them by name)."""
    from mindforge.update.handoff import EngineAdmin

    admin = EngineAdmin(url, api_key=settings.api_key)
    try:
        loaded = set(admin.loaded())
        for name, path in adapters.items():
            if name not in loaded:
                log(f"loading {name} into the engine")
                admin.load(name, path)
    finally:
        admin.close()


def discovery_runner(settings: Settings, log: Callable[[str], None]) -> StageRunner:
    def run(config: Any) -> Mapping[str, Any]:
        open_services = need("mindforge.discovery.runtime", "open_services")
        run_discovery = need("mindforge.discovery.stage", "run_discovery")
        with call_accepting(open_services, settings, config, log=log) as services:
            return _as_json(run_discovery(config, services))

    return run


def expansion_runner(settings: Settings, log: Callable[[str], None]) -> StageRunner:
    def run(config: Any) -> Mapping[str, Any]:
        from mindforge.expansion.runtime import open_services
        from mindforge.expansion.stage import run_expansion

        with open_services(settings, config, log=log) as services:
            return _as_json(run_expansion(config, services))

    return run


def update_runner(settings: Settings, log: Callable[[str], None],
                  progress: Callable[[int, int, Any], None] | None = None) -> StageRunner:
    def run(config: Any) -> Mapping[str, Any]:
        from mindforge.update.runtime import open_services
        from mindforge.update.stage import run_update

        with open_services(config, settings, progress=progress) as services:
            return _as_json(run_update(config, services))

    return run


def library_runners(settings: Settings, log: Callable[[str], None] = lambda m: None,
                    progress: Callable[[int, int, Any], None] | None = None) -> dict[str, StageRunner]:
    return {
        "discovery": discovery_runner(settings, log),
        "expansion": expansion_runner(settings, log),
        "update": update_runner(settings, log, progress),
    }


def _as_json(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    return dict(result)
