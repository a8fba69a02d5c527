"""The services of a run, built in one place: engine, adapter catalog, model, HCP, sandbox settings.

``open_run_services(settings, run_dir, cycle, stage)`` is the only code that
finds or starts an engine. The cycle calls it once for the whole run; a
stage run alone (``mindforge update``, ``expand``, ``discover``, ``eval``)
calls the same function. It yields ``RunServices``, plain data (URLs,
paths, settings), so it can be a Prefect parameter and travel to a worker in
another process; each stage builds its live objects (a sandbox pool, a
harness client) from it and closes them itself.

What it guarantees on entry:

- the run's adapter catalog (``RUN_DIR/adapters``) holds every adapter the
  HCP in force names (version 0 of each route is created fresh on first use:
  B = 0, so it computes exactly the base model);
- an engine answers at ``engine_url`` and serves those adapters: a healthy
  configured one (``settings.engine_url``, else the one ``mindforge up``
  started, when it is the backend the settings name) gets the missing ones
  loaded; otherwise the engine of ``settings.engine_backend`` (the embedded
  one, or vLLM from ``.venv-vllm``) is started on the run's model and
  stopped on exit.

The HCP in force at any point of the run is ``RunDir.hcp_in_force``; the
sandbox settings of a stage come from that HCP's guarded section
(``mindforge.sandbox.config.sandbox_config``), the same for every stage.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from mindforge.catalog import WEIGHTS_FILE, AdapterCatalog, copy_adapter, file_sha256
from mindforge.engine.admin import EngineAdmin
from mindforge.errors import MindForgeError
from mindforge.hcp import HCP, load_hcp
from mindforge.runlock import describe, run_lock
from mindforge.sandbox.config import SandboxConfig, sandbox_config
from mindforge.services import healthy
from mindforge.settings import Settings
from mindforge.store import RunDir

if TYPE_CHECKING:
    from mindforge.harness import EngineClient, Harness


class ServicesError(MindForgeError):
    pass


class RunServices(BaseModel):
    """What every stage of a run shares; data only (see the module doc)."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path
    settings: Settings
    model_path: Path | None  # None, like engine_url, when the stage asked for no engine
    engine_url: str | None

    @property
    def catalog(self) -> AdapterCatalog:
        return catalog_for(self.run_dir)

    def hcp_path(self, cycle: int, stage: str, explicit: Path | None = None) -> Path:
        return Path(explicit) if explicit is not None else RunDir(self.run_dir).hcp_in_force(cycle, stage)

    def sandbox(self, hcp: HCP) -> SandboxConfig:
        return sandbox_config(hcp.guarded, pool_size=self.settings.sandbox_pool_size,
                              docker_host=self.settings.docker_host)

    def require_engine(self) -> str:
        if self.engine_url is None:
            raise ServicesError("this stage was opened without an engine, and it needs one")
        return self.engine_url

    def admin(self) -> EngineAdmin:
        return EngineAdmin(self.require_engine(), api_key=self.settings.api_key,
                           declared_dtype=self.settings.engine_dtype)

    def engine_dtype(self) -> str:
        """What the run's engine computes in: as it reports it, else as the settings declare it."""
        admin = self.admin()
        try:
            return admin.dtype() or self.settings.engine_dtype
        finally:
            admin.close()

    def generation_counters(self) -> dict[str, float] | None:
        """The engine's token counters now (None without an engine or without counters): a cycle
        takes them before and after each stage to say what the stage generated, and how fast."""
        if self.engine_url is None:
            return None
        admin = self.admin()
        try:
            return admin.generation_counters()
        finally:
            admin.close()

    def engine_client(self) -> EngineClient:
        from mindforge.harness import EngineClient

        return EngineClient(self.require_engine(), api_key=self.settings.api_key)

    def harness(self, hcp: HCP, client: EngineClient | None = None) -> Harness:
        """The production harness of ``hcp`` against the run's engine (``client`` shares one pool)."""
        from mindforge.harness import Harness, renderer_for

        client = client or self.engine_client()
        assert self.model_path is not None  # set whenever engine_url is
        return Harness(hcp, client, renderer_for(self.model_path))

    def serve(self, doc: dict[str, Any], log: Callable[[str], None] = lambda m: None) -> dict[str, Path]:
        """Make the engine serve every adapter ``doc`` names (loading what it lacks); name -> folder."""
        adapters = served_adapters(self.catalog, doc)
        if self.engine_url is not None:
            load_missing(self.admin(), adapters, log)
        return adapters


def catalog_for(run_dir: Path) -> AdapterCatalog:
    return AdapterCatalog(Path(run_dir) / "adapters")


def ensure_initial_adapters(catalog: AdapterCatalog, doc: dict[str, Any], model_path: Path) -> list[str]:
    """Store fresh adapters as version 0 of each route the catalog lacks; returns the names added."""
    from mindforge.engine.registry import init_adapters  # torch: only when adapters must be made

    missing = [r for r in doc["router"]["routes"] if not catalog.versions(r)]
    if not missing:
        return []
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
            raise ServicesError(f"the HCP serves {spec['served_adapter']} for {route}, which the catalog "
                                f"{catalog.root} does not hold")
        out[entry.name] = entry.path
    return out


def load_missing(admin: EngineAdmin, adapters: dict[str, Path], log: Callable[[str], None]) -> None:
    """Load into the engine the adapters of ``adapters`` it does not serve yet.

    A name it already serves from other weights (two runs sharing one engine, each with its own
    ``mf-L2-v0001``) is an error: the engine would answer this run with the other run's adapter.
    """
    try:
        served = admin.served()
        for name, path in adapters.items():
            if name not in served:
                log(f"loading {name} into the engine")
                admin.load(name, path)
            elif not same_weights(Path(served[name]), path):
                raise ServicesError(
                    f"the engine at {admin.base_url} serves {name} from {served[name]}, whose weights differ from "
                    f"this run's {path}: runs that share an engine must not reuse adapter names (a name is "
                    "loaded once and never reloaded); give this run its own engine (unset MINDFORGE_ENGINE_URL, "
                    "or `mindforge down --only engine`)")
    finally:
        admin.close()


def same_weights(served_from: Path, ours: Path) -> bool:
    """Whether the engine's folder holds our weights; True when it cannot be read from here (a remote engine)."""
    theirs, mine = served_from / WEIGHTS_FILE, ours / WEIGHTS_FILE
    if served_from.resolve() == ours.resolve() or not theirs.is_file():
        return True
    return file_sha256(theirs) == file_sha256(mine)


def running_engine(settings: Settings) -> str | None:
    """The URL of an engine that answers now, if any (configured first, then ``mindforge up``'s).

    A configured ``engine_url`` is used whatever serves it (vLLM or SGLang on GPUs). The local
    engine ``mindforge up`` started is reused only when it is the backend the settings name: a
    run asked to go through vLLM must not quietly run on the embedded engine, nor the reverse.
    """
    if settings.engine_url and healthy(settings.engine_url.rstrip("/") + "/health"):
        return settings.engine_url.rstrip("/")
    url = settings.local_engine_url
    if not healthy(url + "/health"):
        return None
    if settings.engine_backend is not None:
        admin = EngineAdmin(url, api_key=settings.api_key, timeout_s=30.0)
        try:
            kind = admin.kind()
        finally:
            admin.close()
        if kind != settings.engine_backend:
            raise ServicesError(
                f"this run asks for the {settings.engine_backend} engine, but the {kind} engine answers at {url} "
                f"(`mindforge up` started it); stop it with `mindforge down --only engine`, or start the "
                f"one asked for with `mindforge up --only engine --engine {settings.engine_backend}`")
    return url


def prepare_catalog(settings: Settings, root: Path, doc: dict[str, Any],
                    log: Callable[[str], None] = lambda m: None) -> tuple[Path, dict[str, Path]]:
    """The model folder, and the adapters ``doc`` serves from the catalog under ``root`` (created on first use)."""
    from mindforge.engine.registry import resolve_model

    model_path = Path(resolve_model(settings.model, settings))
    catalog = catalog_for(root)
    added = ensure_initial_adapters(catalog, doc, model_path)
    if added:
        log(f"adapter catalog started with {', '.join(added)}")
    return model_path, served_adapters(catalog, doc)


@contextmanager
def open_run_services(settings: Settings, run_dir: Path, cycle: int, stage: str = "discovery", *,
                      hcp: Path | None = None, engine: bool = True,
                      log: Callable[[str], None] = lambda m: None) -> Iterator[RunServices]:
    """The run's services at ``stage`` of ``cycle`` (see the module doc); what it started it stops.

    The run directory is locked for the block (``mindforge.runlock``): a second writer is refused
    with the holder named, and a lock whose holder died is taken over.
    """
    with run_lock(run_dir) as lock:
        if lock.took_over:
            log(f"took over the lock of a writer that died: {describe(lock.took_over)}")
        with _open(settings, run_dir, cycle, stage, hcp=hcp, engine=engine, log=log) as services:
            yield services


@contextmanager
def _open(settings: Settings, run_dir: Path, cycle: int, stage: str, *, hcp: Path | None, engine: bool,
          log: Callable[[str], None]) -> Iterator[RunServices]:
    if not engine:  # nothing to prepare: no model is resolved and no adapter made
        yield RunServices(run_dir=Path(run_dir), settings=settings, model_path=None, engine_url=None)
        return
    hcp_path = Path(hcp) if hcp is not None else RunDir(run_dir).hcp_in_force(cycle, stage)
    doc = load_hcp(hcp_path).to_document()
    model_path, adapters = prepare_catalog(settings, run_dir, doc, log)
    services = RunServices(run_dir=Path(run_dir), settings=settings, model_path=model_path, engine_url=None)
    url = running_engine(settings)
    if url is not None:
        log(f"using the engine at {url}")
        services = services.model_copy(update={"engine_url": url})
        services.serve(doc, log)
        yield services
        return
    from mindforge.engine import EngineProcess

    backend = settings.engine_backend or "embedded"
    log(f"starting the {backend} engine on {settings.model}")
    with EngineProcess(model_path, adapters, port=0, settings=settings, backend=backend,
                       log_path=Path(run_dir) / "engine.log") as proc:
        log(f"{backend} engine up at {proc.url}")
        yield services.model_copy(update={"engine_url": proc.url})


@contextmanager
def run_services_for(run: RunServices | None, run_dir: Path, cycle: int, stage: str, *,
                     hcp: Path | None = None, engine: bool = True,
                     log: Callable[[str], None] = lambda m: None) -> Iterator[RunServices]:
    """``run`` when the caller (the cycle) built it; else the run's services opened for this stage alone."""
    if run is not None:
        yield run
        return
    from mindforge.settings import (
        load_settings,  # an entry point's job: a stage flow run as a deployment
    )

    with open_run_services(load_settings(), run_dir, cycle, stage, hcp=hcp, engine=engine, log=log) as opened:
        yield opened
