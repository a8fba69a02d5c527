"""Canonical JSON and the version hash of an HCP document.

Canonical form: keys sorted, no whitespace, UTF-8 (non-ASCII kept as is), and
integral floats written as integers. The last rule makes ``1.0`` and ``1``
the same version: a document and the dump of its pydantic model (which turns
an ``int`` in a float field into ``1.0``) hash alike. The version of a
document is ``"h-" + the first 16 hex digits of sha256(canonical JSON)``; it
is what trajectories and tasks record as ``hcp_version``. A top-level
``$schema`` (where an editor finds the schema) is not part of the canonical
form, so adding one to a file does not change its version.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel


def _normalize(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return _normalize(obj.model_dump(mode="json"))
    if isinstance(obj, dict):
        return {str(k): _normalize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_normalize(v) for v in obj]
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{obj!r} is not a JSON number")
        if obj.is_integer():
            return int(obj)
    return obj


# Keys for editors, not part of what a document means: a ``$schema`` pointing an
# editor at the schema changes neither the version nor the model.
EDITOR_KEYS = ("$schema",)


def without_editor_keys(doc: Any) -> Any:
    """The document without its editor keys (the same object when it has none).

    For writers that put a copy of a document elsewhere, where a relative
    ``$schema`` would no longer point at the schema.
    """
    if isinstance(doc, dict) and any(k in doc for k in EDITOR_KEYS):
        return {k: v for k, v in doc.items() if k not in EDITOR_KEYS}
    return doc


def canonical_json(doc: Any, editor_keys: bool = False) -> str:
    """The canonical text of a document (or an ``HCP`` model), without its editor keys unless asked."""
    content = doc if editor_keys else without_editor_keys(doc)
    return json.dumps(_normalize(content), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def pretty_json(doc: Any) -> str:
    """Canonical content, indented for people and diffs (ends with a newline).

    Editor keys are kept: a file written from a document that had a ``$schema`` still has it.
    """
    return json.dumps(_normalize(doc), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def hcp_hash(doc: Any) -> str:
    """The version of a document: ``h-`` and 16 hex digits of sha256."""
    digest = hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()
    return "h-" + digest[:16]
