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
