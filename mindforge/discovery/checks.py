"""Cheap checks, run before anything costs a container or a model call.

A candidate arrives as a plain dict (the model proposer's JSON, or a
procedural proposer's task dump). It is rejected as ``malformed`` when it is
not a valid ``Task`` or breaks a size limit, when a function task's reference
or tests do not parse or the reference does not define the entry point; and
as ``nondeterministic`` when the reference or tests reach for randomness, the
clock, the network or files without declaring it (a verdict that depends on
those is not a verdict about the solution).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from pydantic import ValidationError

from mindforge.discovery.config import DiscoveryConfig
from mindforge.errors import pydantic_problems
from mindforge.tasks.models import Task

# module roots and call names that bring each source of nondeterminism
_BANNED: dict[str, tuple[set[str], set[str]]] = {
    "random": ({"random", "secrets", "uuid"}, {"urandom", "getrandom"}),
    # datetime's date arithmetic is deterministic; its clock is reached through now/today/utcnow
    "clock": ({"time"}, {"now", "today", "utcnow", "perf_counter", "monotonic"}),
    "network": ({"socket", "urllib.request", "http.client", "requests", "httpx", "ftplib", "smtplib", "ssl"}, set()),
    "files": ({"shutil", "pathlib", "tempfile", "glob"}, {"open", "listdir", "remove", "unlink"}),
}


class Rejection(Exception):
    """A candidate failed a check; ``reason`` is the reason code, ``detail`` says what."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def parse_candidate(data: Any) -> Task:
    if isinstance(data, Task):
        return data
    if not isinstance(data, dict):
        raise Rejection("malformed", f"expected a JSON object, got {type(data).__name__}")
    try:
        return Task.model_validate({k: v for k, v in data.items() if k != "id"})
    except ValidationError as exc:
        where, problem = pydantic_problems(exc)[0]
        raise Rejection("malformed", f"{where}: {problem}") from None


def _parse(code: str, what: str) -> ast.Module:
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        raise Rejection("malformed", f"{what} does not parse: {exc.msg} (line {exc.lineno})") from None


def _root(module: str) -> str:
    """The banned-module key of an import: ``urllib.request`` stays whole (``urllib.parse`` is harmless)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("urllib", "http") else parts[0]


def sources_used(tree: ast.AST) -> set[str]:
    """Which nondeterminism sources the code reaches for (by imports and well-known calls)."""
    found = set()
    for node in ast.walk(tree):
        roots: list[str] = []
        if isinstance(node, ast.Import):
            roots = [_root(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots = [_root(node.module)] + [_root(f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            roots = [] if not name else [f"call:{name}"]
        elif isinstance(node, ast.Name) and node.id == "__import__":
            roots = ["call:__import__"]
        for kind, (mods, calls) in _BANNED.items():
            if any(r in mods or (r.startswith("call:") and r[5:] in calls) for r in roots):
                found.add(kind)
        if "call:__import__" in roots:
            found.add("network")  # dynamic imports hide what they load: treated as the worst case
    return found


def check(task: Task, config: DiscoveryConfig) -> None:
    """Raise ``Rejection`` when a cheap check fails."""
    if len(task.prompt) > config.max_prompt_chars:
        raise Rejection("malformed", f"prompt has {len(task.prompt)} characters (limit {config.max_prompt_chars})")
    if len(task.reference) > config.max_reference_chars:
        raise Rejection("malformed", f"reference has {len(task.reference)} characters "
                                     f"(limit {config.max_reference_chars})")
    if len(task.tests) > config.max_tests:
        raise Rejection("malformed", f"{len(task.tests)} tests (limit {config.max_tests})")
    if len({t.name for t in task.tests}) != len(task.tests):
        raise Rejection("malformed", "test names are not unique")
    trees = [(f"test {t.name!r}", _parse(t.code, f"test {t.name!r}")) for t in task.tests]
    if task.setup:
        trees.append(("setup", _parse(task.setup, "setup")))
    if task.output_kind == "function":
        ref = _parse(task.reference, "reference")
        defined = {n.name for n in ref.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if task.entry_point not in defined:
            raise Rejection("malformed", f"reference does not define entry point {task.entry_point}()")
        if not re.search(rf"\b{re.escape(task.entry_point or '')}\b", task.prompt):
            raise Rejection("malformed", f"prompt does not name the entry point {task.entry_point}()")
        trees.append(("reference", ref))
    if task.tool_impl:
        trees.append(("tool_impl", _parse(task.tool_impl, "tool_impl")))
    for what, tree in trees:
        banned = sources_used(tree) - set(task.declares)
        if banned:
            raise Rejection("nondeterministic", f"{what} uses {', '.join(sorted(banned))} without declaring it")
