"""`mindforge up` / `mindforge down`: the local Prefect server, embedded engine and proxy.

Services that already answer their health URL are reused, whoever started
them; PID files and logs live in the settings' services folder.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from mindforge.cli._common import EngineOption, choices, settings_with_engine, user_errors

_ONLY_HELP = "Only these services (repeatable)."
_ONLY = choices("prefect", "engine", "proxy")


def _selected(only: list[str] | None) -> list[str]:
    from mindforge.cycle.local import SERVICES
    from mindforge.errors import InputError

    names = list(only or SERVICES)
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise InputError("mindforge up/down", "--only", f"unknown services {unknown}; expected {list(SERVICES)}")
    return [n for n in SERVICES if n in names]


def _proxy_built() -> bool:
    from typer.main import get_command

    from mindforge.cli import app

    return "serve" in getattr(get_command(app), "commands", {})


@user_errors()
def up(
    only: Annotated[list[str] | None, typer.Option("--only", help=_ONLY_HELP, **_ONLY)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the services as one JSON list.")] = False,
    engine: EngineOption = None,
) -> None:
    """Start (or reuse) the local Prefect server, the engine (embedded or vLLM) and the proxy."""
    from mindforge.cycle import local
    from mindforge.services import ServiceManager

    settings = settings_with_engine(engine)
    if settings.engine_backend == "vllm" and "engine" in _selected(only):
        from mindforge.engine.vllm_backend import vllm_python

        vllm_python(settings)  # a missing .venv-vllm is named here, not in the engine's log
    manager = ServiceManager(settings.services_dir)
    out = []
    for name in _selected(only):
        if name == "proxy" and not _proxy_built():
            out.append({"name": name, "state": "not built (mindforge serve is missing)"})
            continue
        if name == "prefect":
            spec = local.prefect_spec(settings)
        elif name == "engine":
            spec = local.engine_spec(settings, local.engine_adapters(settings))
        else:
            spec = local.proxy_spec(settings)
        typer.echo(f"{name}: starting or reusing ({spec.health_url})", err=True)
        status, started = manager.ensure(spec)
        out.append({"name": name, "state": "started" if started else "reused", "url": status.url,
                    "pid": status.pid, "log": str(status.log)})
    if as_json:
        print(json.dumps(out))
        return
    for s in out:
        typer.echo(f"{s['name']:8} {s['state']:8} {s.get('url', '')}  pid {s.get('pid')}  log {s.get('log', '-')}")
    if any(s["name"] == "prefect" for s in out):
        typer.echo(f"Prefect UI: http://{settings.host}:{settings.prefect_port}  "
                   f"(export PREFECT_API_URL={settings.prefect_api_url})")


@user_errors()
def down(only: Annotated[list[str] | None, typer.Option("--only", help=_ONLY_HELP, **_ONLY)] = None) -> None:
    """Stop the services `mindforge up` started (SIGTERM to each process group, then SIGKILL)."""
    from mindforge.services import ServiceManager
    from mindforge.settings import load_settings

    manager = ServiceManager(load_settings().services_dir)
    stopped = manager.down(_selected(only))
    typer.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running from here'}")
