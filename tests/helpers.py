"""Helpers for tests. Integration tests use the real parts; under CI=true a
missing part (Docker engine, default model) is a failure, never a skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, why: str) -> None:
    """Skip locally when a real part is missing; fail under CI, where setup installs it."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required for this test and missing under CI: {why}")
    pytest.skip(why)


def require_vllm() -> None:
    """vLLM's CPU build in .venv-vllm (`make setup VLLM=1`, which CI always runs)."""
    from mindforge.engine.vllm_backend import VllmMissing, vllm_python
    from mindforge.settings import load_settings

    try:
        vllm_python(load_settings())
    except VllmMissing as exc:
        require(False, str(exc))
