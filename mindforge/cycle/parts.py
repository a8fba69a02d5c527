"""Parts other packages provide, imported when used, with a plain error when absent."""

from __future__ import annotations

import importlib
from typing import Any

from mindforge.errors import MindForgeError


class MissingPart(MindForgeError):
    pass


def need(module: str, attr: str | None = None) -> Any:
    """``module`` (or ``module.attr``), or a MissingPart naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise MissingPart(f"{module} is needed by the RSI cycle and is not importable: {exc}") from None
    if attr is None:
        return mod
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise MissingPart(f"{module}.{attr} is needed by the RSI cycle and does not exist") from None


def call_accepting(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments it declares (a stage written in parallel may take fewer)."""
    import inspect

    target = getattr(fn, "fn", fn)  # a Prefect flow keeps its function in .fn
    params = inspect.signature(target).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)
