"""The local services ``mindforge up`` starts: Prefect server, engine (embedded or vLLM), proxy.

Each is a ``ServiceSpec`` for ``mindforge.services.ServiceManager`` (PID file,
log, health URL, reuse of a healthy one). The engine serves the default
HCP's adapters from a catalog in the services folder, created on first use
(fresh adapters for the base model as version 0 of each route, as the run
catalogs start), so a cycle pointed at this engine finds the names its HCP
serves already loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mindforge.paths import default_hcp_path
from mindforge.services import ServiceSpec
from mindforge.settings import Settings

SERVICES = ("prefect", "engine", "proxy")
_QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def prefect_spec(settings: Settings) -> ServiceSpec:
    return ServiceSpec(
        name="prefect", health_url=f"{settings.prefect_api_url}/health", env=dict(_QUIET),
        argv=(_bin("prefect"), "server", "start", "--host", settings.host, "--port", str(settings.prefect_port)),
    )


def engine_adapters(settings: Settings) -> dict[str, Path]:
    """Served name -> folder for the default HCP (creates the services catalog on first use)."""
    from mindforge.hcp import load_hcp
    from mindforge.run_services import prepare_catalog

    return prepare_catalog(settings, settings.services_dir, load_hcp(default_hcp_path()).to_document())[1]


def engine_spec(settings: Settings, adapters: dict[str, Path]) -> ServiceSpec:
    argv = [sys.executable, "-m", "mindforge.engine", "serve", "--model", settings.model,
            "--host", settings.host, "--port", str(settings.engine_port), "--dtype", settings.engine_dtype]
    for name, path in adapters.items():
        argv += ["--adapter", f"{name}={path}"]
    vllm = settings.engine_backend == "vllm"
    if vllm:
        argv += ["--backend", "vllm"]
    # vLLM takes minutes to start on two busy CPU cores (measured 87-117 s at load 7).
    return ServiceSpec(name="engine", argv=tuple(argv), health_url=f"{settings.local_engine_url}/health",
                       start_timeout_s=900.0 if vllm else 300.0)


def proxy_spec(settings: Settings, hcp: Path | None = None) -> ServiceSpec:
    url = f"http://{settings.host}:{settings.proxy_port}"
    argv = [_bin("mindforge"), "serve", "--hcp", str(hcp or default_hcp_path()), "--upstream",
            settings.local_engine_url, "--host", settings.host, "--port", str(settings.proxy_port)]
    if settings.host in ("127.0.0.1", "localhost", "::1"):
        argv.append("--allow-unauthenticated")  # loopback only, by the proxy's own rule
    return ServiceSpec(name="proxy", argv=tuple(argv), health_url=f"{url}/health")
