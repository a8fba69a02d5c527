"""Errors that reach users. Imports nothing internal (a leaf of the core)."""

from __future__ import annotations


class MindForgeError(Exception):
    """Base of every error MindForge raises on purpose."""


class InputError(MindForgeError):
    """Bad input: names where it is (file, line, JSON pointer) and what was expected."""

    def __init__(self, source: str, where: str, problem: str):
        self.source = source
        self.where = where
        self.problem = problem
        loc = f"{source}:{where}" if where else source
        super().__init__(f"{loc}: {problem}")


def pydantic_problems(exc: Exception) -> list[tuple[str, str]]:
    """(JSON pointer, message) pairs from a pydantic ValidationError."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return [("", str(exc))]
    out = []
    for err in errors():
        loc = "".join(f"/{p}" for p in err.get("loc", ()))
        out.append((loc or "/", err.get("msg", "invalid")))
    return out
