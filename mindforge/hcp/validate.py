"""Validating and loading HCP documents, with errors that say where and what.

Validation is layered and reports everything it finds at once:

1. JSON Schema (``mindforge/data/hcp/schemas/``, the source of truth), every error turned
   into an ``InputError`` whose ``where`` is the JSON pointer of the offending
   value (for a missing or unknown property: the pointer of that property);
2. when the schema accepts the document, the cross-field rules of
   ``mindforge.hcp.semantics``;
3. when both accept it, the pydantic model. Its disagreeing with the schema is
   a bug, which ``tests/test_hcp.py`` guards against; should it happen anyway,
   pydantic's errors are reported in the same form rather than hidden.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mindforge.errors import InputError, MindForgeError, pydantic_problems
from mindforge.hcp.models import HCP
from mindforge.hcp.semantics import semantic_problems
from mindforge.paths import hcp_schemas_dir

SCHEMA_FILE = "hcp.schema.json"
_MAX_SHOWN = 60


class DocumentErrors(InputError):
    """Several problems in one document; ``errors`` holds each as an InputError."""

    def __init__(self, source: str, errors: list[InputError]):
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(source, first.where, first.problem + more)

    def lines(self) -> list[str]:
        return [f"{e.source}: {e.where or '/'}: {e.problem}" for e in self.errors]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def schema_dir() -> Path:
    """The folder of the JSON Schema files (package data: ``mindforge/data/hcp/schemas``)."""
    return hcp_schemas_dir()


@lru_cache(maxsize=1)
def schema_validator() -> Any:
    """A Draft 2020-12 validator of a whole document, its ``$ref`` files registered."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    if not (schema_dir() / SCHEMA_FILE).is_file():
        raise MindForgeError(
            f"HCP schemas not found in {schema_dir()}: the package was installed without its data; "
            "reinstall MindForge from its wheel or a source checkout"
        )
    resources = []
    for path in sorted(schema_dir().glob("*.schema.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    registry = Registry().with_resources(resources)
    root = json.loads((schema_dir() / SCHEMA_FILE).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(root)
    return Draft202012Validator(root, registry=registry)


def pointer(parts: Any) -> str:
    """RFC 6901 pointer of a path given as a sequence of keys and indices."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _schema_problems(error: Any) -> list[tuple[str, str]]:
    """(pointer, message) pairs for one jsonschema error."""
    base = pointer(error.absolute_path)
    where = base or "/"
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        missing = [
            k
            for k in expected
            if isinstance(value, dict) and k not in value and repr(k) in error.message
        ]
        return [(f"{base}/{k}", "missing; this property is required") for k in missing]
    if kind == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in value if k not in known)
        expected_keys = ", ".join(sorted(known))
        return [
            (f"{base}/{k}", f"unknown property; expected one of: {expected_keys}") for k in extra
        ]
    messages = {
        "type": lambda: (
            f"expected {expected if isinstance(expected, str) else ' or '.join(expected)}, got {_json_type(value)} {_short(value)}"
        ),
        "enum": lambda: f"expected one of {', '.join(map(str, expected))}, got {_short(value)}",
        "const": lambda: f"expected {_short(expected)}, got {_short(value)}",
        "pattern": lambda: _pattern_message(expected, value),
        "minimum": lambda: f"expected a number >= {expected}, got {value}",
        "maximum": lambda: f"expected a number <= {expected}, got {value}",
        "exclusiveMinimum": lambda: f"expected a number > {expected}, got {value}",
        "exclusiveMaximum": lambda: f"expected a number < {expected}, got {value}",
        "minLength": lambda: (
            "expected a non-empty string"
            if expected == 1
            else f"expected at least {expected} characters"
        ),
        "maxItems": lambda: f"expected at most {expected} items, got {len(value)}",
        "uniqueItems": lambda: "expected unique items",
    }
    make = messages.get(kind)
    return [(where, make() if make else error.message)]


def _pattern_message(pattern: str, value: Any) -> str:
    if "{{" in pattern.replace("\\{", "{"):
        token = pattern.replace("\\", "")
        return f"expected the text to contain the placeholder {token}"
    return f"expected a string matching {pattern}, got {_short(value)}"


def validate_document(doc: Any, source: str = "<document>") -> list[InputError]:
    """Every problem of a parsed document, in a stable order; empty when valid."""
    errors = sorted(
        schema_validator().iter_errors(doc),
        key=lambda e: (list(map(str, e.absolute_path)), e.validator),
    )
    problems = [p for e in errors for p in _schema_problems(e)]
    if not problems:
        problems = semantic_problems(doc)
    if not problems:
        try:
            HCP.from_document(doc)
        except ValidationError as exc:
            problems = pydantic_problems(exc)
    return [InputError(source, where, message) for where, message in problems]


def parse_hcp(doc: Any, source: str = "<document>") -> HCP:
    """The model of a parsed document; raises DocumentErrors listing every problem."""
    errors = validate_document(doc, source)
    if errors:
        raise DocumentErrors(source, errors)
    return HCP.from_document(doc)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of duplicate keys silently; an HCP that is hashed,
    # diffed and reviewed must not hide a second value.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_json(path: str | Path) -> Any:
    """A JSON file's content; InputError naming line and column when it is not JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"byte {exc.start}", "not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InputError(str(path), where, f"not JSON: {exc.msg}") from None
    except _DuplicateKey as exc:
        problem = f"key {exc.args[0]!r} appears twice in one object; a document must say one thing"
        raise InputError(str(path), "", problem) from None


def load_hcp(path: str | Path) -> HCP:
    """Read, validate and model one HCP file (DocumentErrors names file and pointers)."""
    return parse_hcp(read_json(path), str(path))
