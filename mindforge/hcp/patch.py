"""RFC 6902 JSON Patch on HCP documents: guarded fields refused, results re-validated.

Order of checks, and why: the patch's own shape first (a malformed operation
says nothing about the document), then ``/guarded`` for every operation
*before* anything is applied (an edit that would touch how work is graded is
refused outright, even if a later operation would undo it), then the
application itself, then full validation of the result. The input document is
never modified; the caller gets a new document or an error, so a rejected
patch costs nothing downstream.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from mindforge.errors import InputError
from mindforge.hcp.semantics import GUARDED_PREFIX, under_guarded
from mindforge.hcp.validate import DocumentErrors, validate_document

OPS = ("add", "remove", "replace", "move", "copy", "test")
_NEEDS_FROM = ("move", "copy")
_NEEDS_VALUE = ("add", "replace", "test")


class GuardedEdit(InputError):
    """A patch operation that touches ``/guarded``."""


def _check_shape(ops: Any, source: str) -> list[InputError]:
    if not isinstance(ops, list):
        return [InputError(source, "/", "expected a JSON Patch: an array of operations")]
    errors = []
    for i, op in enumerate(ops):
        where = f"/{i}"
        if not isinstance(op, dict):
            errors.append(InputError(source, where, "expected an operation object"))
            continue
        if op.get("op") not in OPS:
            errors.append(
                InputError(
                    source, f"{where}/op", f"expected one of {', '.join(OPS)}, got {op.get('op')!r}"
                )
            )
            continue
        fields = ["path"] + (["from"] if op["op"] in _NEEDS_FROM else [])
        for field in fields:
            if not isinstance(op.get(field), str) or not (
                op[field] == "" or op[field].startswith("/")
            ):
                errors.append(
                    InputError(
                        source,
                        f"{where}/{field}",
                        "expected a JSON pointer string ('' or starting with '/')",
                    )
                )
        if op["op"] in _NEEDS_VALUE and "value" not in op:
            errors.append(
                InputError(source, f"{where}/value", f"missing; '{op['op']}' needs a value")
            )
    return errors


def guarded_violations(ops: list[dict[str, Any]], source: str = "<patch>") -> list[GuardedEdit]:
    """Operations whose ``path`` or ``from`` is ``/guarded``, inside it, or the whole document."""
    out = []
    for i, op in enumerate(ops):
        for field in ("path", "from"):
            target = op.get(field)
            if not isinstance(target, str):
                continue
            if under_guarded(target) or target == "":
                what = "the whole document (which contains /guarded)" if target == "" else target
                out.append(
                    GuardedEdit(
                        source,
                        f"/{i}/{field}",
                        f"'{op.get('op')}' on {what} refused: {GUARDED_PREFIX} (verifier and sandbox settings) may not be edited",
                    )
                )
    return out


def apply_patch(doc: dict[str, Any], ops: Any, source: str = "<patch>") -> dict[str, Any]:
    """A new, valid document: ``doc`` with ``ops`` applied.

    Raises DocumentErrors (malformed patch, guarded edit, failed application,
    or an invalid result; each error names a JSON pointer: into the patch for
    the first three, into the resulting document for the last).
    """
    shape = _check_shape(ops, source)
    if shape:
        raise DocumentErrors(source, shape)
    guarded: list[InputError] = list(guarded_violations(ops, source))
    if guarded:
        raise DocumentErrors(source, guarded)
    result = copy.deepcopy(doc)
    for i, op in enumerate(copy.deepcopy(ops)):
        # One at a time, so that a failure names the operation (RFC 6902: all or nothing).
        try:
            result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            raise DocumentErrors(
                source,
                [
                    InputError(
                        source, f"/{i}", f"cannot apply '{op['op']}' to {op['path'] or '/'}: {exc}"
                    )
                ],
            ) from None
    errors = validate_document(result, f"{source} (patched document)")
    if errors:
        raise DocumentErrors(source, errors)
    return result


def served_adapter_patch(route: str, served_adapter: str) -> list[dict[str, Any]]:
    """The edit the Update stage makes when a route's adapter gets new weights."""
    return [
        {"op": "replace", "path": f"/router/routes/{route}/served_adapter", "value": served_adapter}
    ]


def serving_patch(source: Any) -> list[dict[str, Any]]:
    """The edits that serve ``source``'s (an HCP's) adapter versions on every route, and change nothing else:
    an ablation scores one HCP's prompts and settings with another's weights."""
    return [op for route in source.router.routes for op in served_adapter_patch(route, source.served_adapter(route))]
