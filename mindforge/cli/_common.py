"""Helpers shared by the command modules: turning MindForgeError into exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import typer

from mindforge.errors import MindForgeError


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
