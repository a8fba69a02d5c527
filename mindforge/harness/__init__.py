"""MoL router harness: chat rendering + tool-call codec, router, own views, the proxy.

Public API::

    EngineClient(base_url, api_key=, timeout_s=, retries=, transport=)   async /v1/completions with ids
    ChatRenderer(tokenizer) / ChatRenderer.from_model(path)              messages -> token ids
    Harness(hcp, client, renderer).turn(session, text, ...) -> TurnRecord
    Harness.role("propose" | "reflect", prompt) -> TurnRecord
    open_harness(hcp, url, model_path, api_key=None, client=None) -> Harness
    task_runner(harness, max_tokens=None) -> rollouts TurnRunner

Importing this package does not import torch or transformers (the renderer
loads a tokenizer only when built).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mindforge.harness.client import Completion, EngineClient, EngineError, EngineUnavailable
from mindforge.harness.harness import Harness, ToolResult, TurnRecord
from mindforge.harness.render import ChatRenderer
from mindforge.harness.session import Session
from mindforge.harness.tasks import probe_prompt_ids, task_runner
from mindforge.harness.toolcodec import ParsedAnswer, ToolCall
from mindforge.hcp import HCP

__all__ = [
    "ChatRenderer", "Completion", "EngineClient", "EngineError", "EngineUnavailable", "Harness", "ParsedAnswer",
    "Session", "ToolCall", "ToolResult", "TurnRecord", "open_harness", "probe_prompt_ids", "renderer_for",
    "task_runner",
]

_RENDERERS: dict[str, ChatRenderer] = {}
# Stages judge tasks on worker threads, and the first import of transformers' lazy module from two threads
# at once can fail ("cannot import name 'AutoTokenizer'"): one thread loads, the others wait for it.
_RENDERERS_LOCK = threading.Lock()


def renderer_for(model_path: str | Path) -> ChatRenderer:
    """One renderer per model folder and process (loading a tokenizer takes a moment)."""
    key = str(Path(model_path).resolve())
    with _RENDERERS_LOCK:
        if key not in _RENDERERS:
            _RENDERERS[key] = ChatRenderer.from_model(key)
        return _RENDERERS[key]


def open_harness(hcp: HCP, url: str, model_path: str | Path, *, api_key: str | None = None,
                 client: EngineClient | None = None) -> Harness:
    """A harness for ``hcp`` against the engine at ``url``; the model folder gives the tokenizer."""
    return Harness(hcp, client or EngineClient(url, api_key=api_key), renderer_for(model_path))
