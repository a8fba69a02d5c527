"""Shared fixtures; helpers live in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cycle_run():
    """One real deployed cycle per session (tests/e2e_cycle.py), shared by the e2e and browser tests."""
    from e2e_cycle import deployed_run, private_base, stop

    try:
        yield deployed_run(private_base())
    finally:
        stop()
