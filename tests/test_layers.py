"""The package's layers, read from its imports: no back-edges, no stage reaching into another.

core (hcp, tasks, store, settings, errors, paths) → services (sandbox, engine,
harness, rollouts, catalog, run_services, services, tracking, fanout, inflight) → stages (discovery,
expansion, update, eval) → cycle → flows and the CLI. A module may import
its own layer or a lower one; a stage imports no other stage. Imports inside
functions count too (they are lazy, not exempt). A ``__main__`` module is an
entry point, so it sits with the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = {
    "core": ("mindforge.hcp", "mindforge.tasks", "mindforge.store", "mindforge.settings", "mindforge.errors",
             "mindforge.paths", "mindforge.runlock", "mindforge.procs"),
    "services": ("mindforge.sandbox", "mindforge.engine", "mindforge.harness", "mindforge.rollouts",
                 "mindforge.catalog", "mindforge.run_services", "mindforge.services", "mindforge.tracking",
                 "mindforge.fanout", "mindforge.inflight"),
    "stages": ("mindforge.discovery", "mindforge.expansion", "mindforge.update", "mindforge.eval"),
    "cycle": ("mindforge.cycle",),
    "entry": ("mindforge.cli", "mindforge.flows", "mindforge"),
}
RANK = {name: i for i, name in enumerate(LAYERS)}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> tuple[str, str]:
    """(layer, unit): the unit is the package prefix that names it (a stage, a service...)."""
    if module.endswith(".__main__"):
        return "entry", module
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if _within(module, prefix) and (prefix != "mindforge" or module == "mindforge"):
                return layer, prefix
    raise AssertionError(f"{module} belongs to no layer; add it to LAYERS")


def project_modules() -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / "mindforge").rglob("*.py")):
        if path.is_relative_to(REPO / "mindforge" / "data"):
            continue  # package data (the sandbox's runner runs in the container), not a module of the package
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path) -> list[tuple[int, str]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
    return [(line, m) for line, m in found if m.split(".")[0] == "mindforge"]


def test_every_import_points_down_the_layers_and_no_stage_imports_another() -> None:
    problems = []
    for module, path in project_modules().items():
        layer, unit = layer_of(module)
        for line, target in imports_of(module, path):
            to_layer, to_unit = layer_of(target)
            where = f"{path.relative_to(REPO)}:{line}: {module} ({layer}) imports {target} ({to_layer})"
            if RANK[to_layer] > RANK[layer]:
                problems.append(where + ": a lower layer imports a higher one")
            elif layer == to_layer == "stages" and unit != to_unit:
                problems.append(where + ": a stage imports another stage")
    assert not problems, "\n".join(problems)


def test_no_project_module_is_imported_by_name_at_run_time() -> None:
    """Plain imports only: every import a reader or a tool can follow (no importlib, no __import__).

    ``importlib.metadata`` and ``importlib.resources`` read a distribution's data; they import nothing.
    """
    problems = []
    for module, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
                names = ["__import__"]
            problems += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names
                         if n.split(".")[0] in ("importlib", "__import__")
                         and n not in ("importlib.metadata", "importlib.resources")]
    assert not problems, "\n".join(problems)


def test_only_the_flows_import_prefect() -> None:
    """Resume and stage logic stay Prefect-free, so a CLI run and a flow run behave the same."""
    problems = []
    for module, path in project_modules().items():
        if _within(module, "mindforge.flows"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            problems += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "prefect"]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("module", "layer"), [
    ("mindforge.hcp.models", "core"), ("mindforge.rollouts", "services"), ("mindforge.update.stage", "stages"),
    ("mindforge.cycle.core", "cycle"), ("mindforge.flows.rsi_cycle", "entry"), ("mindforge.engine.__main__", "entry"),
])
def test_the_layer_map_places_modules_where_the_architecture_says(module: str, layer: str) -> None:
    assert layer_of(module)[0] == layer


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("def f():\n    from mindforge.cycle import core\n    from .x import y\n")
    assert imports_of("mindforge.hcp.mod", src) == [(2, "mindforge.cycle"), (3, "mindforge.hcp.x")]
