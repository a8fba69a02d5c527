"""Where the project's own data lives, and the source checkout when there is one.

The HCP schemas and examples, the seed tasks and the sandbox build context
are package data (``mindforge/data/``), found through ``importlib.resources``
so an installed wheel and a checkout read the same files. Every module that
needs one of them asks here.

A checkout is something else: configured defaults such as the sealed
benchmark (``../shared/data/mbpp`` beside the checkout) and the vLLM
environment (``.venv-vllm``) are relative to it, and an installed wheel has
none. ``checkout_root`` says which case this is; ``resolve_from_checkout``
turns such a relative setting into a path, or names the setting to make
absolute.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from mindforge.errors import MindForgeError


class NoCheckout(MindForgeError):
    """A setting relative to a source checkout, read where MindForge is installed without one."""


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def data_dir() -> Path:
    """The package's data folder as a real path (Docker, globbing and the task loader need one).

    ``as_file`` cannot hand out a folder before Python 3.12, and a wheel installs
    onto the file system anyway, so the resource is used as the path it is.
    """
    data = files("mindforge") / "data"
    if not isinstance(data, Path):
        raise MindForgeError(f"MindForge's data ({data}) is not on the file system; install the package "
                             "unpacked (pip install), not run from a zip archive")
    return data


def seed_tasks_dir() -> Path:
    return data_dir() / "seed_tasks"


def hcp_examples_dir() -> Path:
    return data_dir() / "hcp" / "examples"


def default_hcp_path() -> Path:
    return hcp_examples_dir() / "default.hcp.json"


def hcp_schemas_dir() -> Path:
    return data_dir() / "hcp" / "schemas"


def sandbox_context_dir() -> Path:
    return data_dir() / "sandboxes" / "python"


def checkout_root() -> Path | None:
    """The source checkout the package runs from (editable install, ``PYTHONPATH``); None when installed."""
    root = package_dir().parent
    return root if (root / "pyproject.toml").is_file() else None


def resolve_from_checkout(path: Path, setting: str) -> Path:
    """A configured path: absolute as given, else relative to the checkout (``../shared/...`` beside it)."""
    path = Path(path)
    if path.is_absolute():
        return path
    root = checkout_root()
    if root is None:
        raise NoCheckout(f"{setting} is {path}, relative to a source checkout, but MindForge is installed "
                         f"without one ({package_dir()}); set {setting} to an absolute path")
    return (root / path).resolve()
