"""The embedded OpenAI-compatible multi-LoRA engine and the model registry.

Importing this package imports no torch: ``EngineProcess`` (which starts the
engine in a subprocess) is loaded on first use, and the heavy modules
(``server``, ``scheduler``, ``model``) are imported only by the process that
serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mindforge.engine.launch import EngineProcess

__all__ = ["EngineProcess"]


def __getattr__(name: str) -> Any:
    if name == "EngineProcess":
        from mindforge.engine.launch import EngineProcess

        return EngineProcess
    raise AttributeError(f"module 'mindforge.engine' has no attribute {name!r}")
