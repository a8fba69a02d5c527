"""pyproject's dependencies are what the package imports at run time: nothing missing, nothing unused."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from helpers import REPO

# Imported only where a user opts in; the error then names the package to install.
OPTIONAL = {"mlflow", "wandb", "prefect_dask", "prefect_ray"}
# Declared but imported by another dependency on the package's behalf.
INDIRECT = {
    "gguf": "transformers reads the default model's GGUF file through it",
    "tensorboard": "torch.utils.tensorboard writes the Update's event files through it",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_normal(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def imported() -> dict[str, str]:
    """Top-level third-party modules the package imports, each with one place that does."""
    out: dict[str, str] = {}
    for path in sorted((REPO / "mindforge").rglob("*.py")):
        if path.is_relative_to(REPO / "mindforge" / "data"):
            continue  # the sandbox runner runs in the container on its own python
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("mindforge", "__future__"):
                    out.setdefault(top, f"{path.relative_to(REPO)}:{node.lineno}")
    return out


def test_every_run_time_import_is_declared_and_every_declaration_is_used() -> None:
    dists = packages_distributions()
    deps = declared()
    missing, used = [], set()
    for module, where in imported().items():
        if module in OPTIONAL:
            continue
        names = {_normal(d) for d in dists.get(module, [])}
        if names & deps:
            used |= names & deps
        else:
            missing.append(f"{where}: imports {module} (distribution {sorted(names) or '?'}), not in dependencies")
    unused = sorted(deps - used - set(INDIRECT))
    assert not missing, "\n".join(missing)
    assert not unused, f"declared but never imported by mindforge/: {unused}"
