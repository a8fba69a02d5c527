"""Helpers shared by the command modules: turning MindForgeError into exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any

import typer

from mindforge.errors import MindForgeError
from mindforge.settings import ENGINE_BACKENDS


def user_errors(exit_code: int = 2) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Print a MindForgeError as one line on stderr and exit with ``exit_code``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except MindForgeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                raise typer.Exit(exit_code) from None

        return inner

    return wrap


def choices(*allowed: str) -> dict[str, Any]:
    """``typer.Option`` keywords that show ``allowed`` as the option's choices and refuse others.

    The command still receives a plain ``str`` (or a list of them). A ``Literal``
    annotation would make typer do this itself, but typer refuses it on
    repeatable options, so every choice option uses this one way.
    """

    def check(value: Any) -> Any:
        given = value if isinstance(value, (list, tuple)) else [value]
        for v in given:
            if v is not None and v not in allowed:
                raise typer.BadParameter(f"{v!r} is not one of {', '.join(map(repr, allowed))}")
        return value

    return {"metavar": "<" + "|".join(allowed) + ">", "callback": check}


# The engine a command starts when none runs; the same choice as a cycle's `engine` parameter.
EngineOption = Annotated[str | None, typer.Option(
    "--engine", help="Engine to start when none runs: embedded, or vllm (from .venv-vllm: make setup VLLM=1); "
                     "a running local engine is reused only when it is this kind.",
    show_default="MINDFORGE_ENGINE_BACKEND, else embedded (reusing whichever local engine runs)",
    **choices(*ENGINE_BACKENDS))]


def settings_with_engine(engine: str | None) -> Any:
    """The settings every command reads, with ``--engine`` applied."""
    from mindforge.settings import load_settings

    return load_settings().with_engine(engine)
