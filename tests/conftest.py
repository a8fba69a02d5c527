"""Shared fixtures; helpers live in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
