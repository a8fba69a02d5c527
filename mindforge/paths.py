"""Where the project's own data lives: the one place that knows the repository's layout.

The HCP schemas and examples, the seed tasks and the sandbox build context
sit beside the package in the source tree (an editable install, a checkout
on ``PYTHONPATH``). Every module that needs one of them asks here, so moving
the data (into package data, say) changes this module alone.

The sealed benchmark is not the project's data: it lives outside the
repository (``../shared/data/mbpp`` beside a checkout) or wherever a user
registers one.
"""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def seed_tasks_dir() -> Path:
    return repo_root() / "seed_tasks"


def default_hcp_path() -> Path:
    return repo_root() / "hcp" / "examples" / "default.hcp.json"


def hcp_schemas_dir() -> Path:
    return repo_root() / "hcp" / "schemas"


def sandbox_context_dir() -> Path:
    return repo_root() / "sandboxes" / "python"


def resolve_from_repo(path: Path) -> Path:
    """A relative path as the repository root sees it (configured defaults such as ``../shared/...``)."""
    return path if path.is_absolute() else (repo_root() / path).resolve()
