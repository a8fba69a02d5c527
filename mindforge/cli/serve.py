"""`mindforge serve`: the OpenAI-compatible MoL proxy."""

from __future__ import annotations

import typer


def serve() -> None:
    """Serve the router harness as an OpenAI-compatible API (not built yet)."""
    print("mindforge serve: not built yet (serving issue)")
    raise typer.Exit(1)
