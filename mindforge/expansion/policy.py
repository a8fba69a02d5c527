"""What Expansion may edit, checked before a single rollout is spent.

A proposal is admitted only when, in this order:

1. it is a JSON Patch (a list of operation objects with ``op`` and ``path``);
2. it touches nothing under ``/guarded`` (how work is graded), nothing under
   ``/tunable`` (the declared search ranges: an optimizer must not widen its
   own search box), and none of the serving identity (engine URL, model, API
   key variable, adapter names: Update moves served adapters, not Expansion);
3. it is an edit, not a rewrite: no ``replace``/``remove``/``move``/``copy``/
   ``add`` at the root or of a whole top-level section (``/router``,
   ``/skills``, ...), so earlier lessons in the incumbent survive;
4. applied to the incumbent, it yields a valid document (``apply_patch``
   validates against the schema and the cross-field rules);
5. neither the patch (canonical JSON) nor the resulting document (hash) was
   tried before, accepted or rejected, and it is not a near-duplicate of a
   tried patch (same operations and paths, numbers within 2% of their range,
   text nearly the same).

The policy remembers what was tried; the stage tells it (``remember``) once a
candidate is evaluated, and replays the journal into it on resume.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from mindforge.errors import InputError
from mindforge.hcp import apply_patch, canonical_json, guarded_violations, hcp_hash
from mindforge.hcp.validate import DocumentErrors

RefusalKind = Literal["malformed", "guarded", "forbidden", "rewrite", "invalid", "duplicate", "near_duplicate"]

FORBIDDEN_PREFIXES = (
    "/tunable",
    "/format",
    "/provider/base_url",
    "/provider/model",
    "/provider/api_key_env",
)
_ROUTE_IDENTITY = ("adapter", "served_adapter")


class Admitted(BaseModel):
    model_config = ConfigDict(frozen=True)

    ops: tuple[dict[str, Any], ...]
    patch_key: str  # canonical JSON of the operations
    document: dict[str, Any]
    hcp_hash: str


class Refusal(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: RefusalKind
    reason: str


def _under(pointer: str, prefix: str) -> bool:
    return pointer == prefix or pointer.startswith(prefix + "/")


def _pointers(op: dict[str, Any]) -> list[str]:
    return [op[f] for f in ("path", "from") if isinstance(op.get(f), str)]


def forbidden_reason(pointer: str) -> str | None:
    """Why Expansion may not touch ``pointer`` (None when it may)."""
    for prefix in FORBIDDEN_PREFIXES:
        if _under(pointer, prefix):
            return f"{pointer} is under {prefix}, which Expansion may not edit"
    parts = pointer.split("/")
    if len(parts) >= 5 and parts[1:3] == ["router", "routes"] and parts[4] in _ROUTE_IDENTITY:
        return f"{pointer} names a served adapter; only Update moves adapters"
    return None


def rewrite_reason(doc: dict[str, Any], op: dict[str, Any]) -> str | None:
    """Why ``op`` rewrites the root or a whole top-level section (None when it is an edit)."""
    for pointer in _pointers(op):
        if op["op"] == "test" or (pointer == op.get("from") and op["op"] == "copy"):
            continue
        if pointer == "":
            return f"'{op['op']}' of the whole document is a rewrite, not an edit"
        parts = pointer.split("/")
        if len(parts) == 2 and isinstance(doc.get(parts[1].replace("~1", "/").replace("~0", "~")), (dict, list)):
            return f"'{op['op']}' of the whole section {pointer} is a rewrite; edit inside it"
    return None


def _malformed(ops: Any) -> str | None:
    if not isinstance(ops, list) or not ops:
        return "expected a non-empty JSON array of operations"
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or not isinstance(op.get("path"), str):
            return f"operation {i} is not an object with string 'op' and 'path'"
    return None


def _close_values(a: Any, b: Any, ratio: float, span: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 0.02 * span
    if isinstance(a, str) and isinstance(b, str):
        return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= ratio
    return canonical_json(a) == canonical_json(b)


def near_duplicate(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], ratio: float,
                   spans: dict[str, float]) -> bool:
    """Same operations on the same pointers with nearly the same values."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x.get("op"), x.get("path"), x.get("from")) != (y.get("op"), y.get("path"), y.get("from")):
            return False
        span = spans.get(x.get("path", ""), max(abs(_num(x.get("value"))), abs(_num(y.get("value"))), 1.0))
        if not _close_values(x.get("value"), y.get("value"), ratio, span):
            return False
    return True


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


class PatchPolicy:
    def __init__(self, near_duplicate_ratio: float = 0.97):
        self.ratio = near_duplicate_ratio
        self.tried_hashes: set[str] = set()
        self.tried_patches: dict[str, list[dict[str, Any]]] = {}

    def remember(self, hcp_version: str, ops: Sequence[dict[str, Any]] | None = None) -> None:
        self.tried_hashes.add(hcp_version)
        if ops:
            self.tried_patches[canonical_json(list(ops))] = [dict(o) for o in ops]

    def check(self, incumbent: dict[str, Any], ops: Any, source: str = "<proposal>") -> Admitted | Refusal:
        if (why := _malformed(ops)) is not None:
            return Refusal(kind="malformed", reason=why)
        guarded = guarded_violations(ops, source)
        if guarded:
            return Refusal(kind="guarded", reason=str(guarded[0]))
        for op in ops:
            for pointer in _pointers(op):
                if (why := forbidden_reason(pointer)) is not None:
                    return Refusal(kind="forbidden", reason=why)
            if (why := rewrite_reason(incumbent, op)) is not None:
                return Refusal(kind="rewrite", reason=why)
        try:
            doc = apply_patch(incumbent, ops, source)
        except DocumentErrors as exc:
            return Refusal(kind="invalid", reason="; ".join(exc.lines()[:3]))
        except InputError as exc:
            return Refusal(kind="invalid", reason=str(exc))
        return self._novelty(incumbent, ops, doc)

    def _novelty(self, incumbent: dict[str, Any], ops: list[dict[str, Any]], doc: dict[str, Any]) -> Admitted | Refusal:
        key = canonical_json(ops)
        version = hcp_hash(doc)
        if version == hcp_hash(incumbent):
            return Refusal(kind="duplicate", reason="the patch changes nothing in the incumbent")
        if key in self.tried_patches:
            return Refusal(kind="duplicate", reason="this exact patch was tried before")
        if version in self.tried_hashes:
            return Refusal(kind="duplicate", reason=f"the resulting document {version} was tried before")
        spans = {t["path"]: float(t["max"]) - float(t["min"]) for t in incumbent.get("tunable", [])}
        for tried in self.tried_patches.values():
            if near_duplicate(ops, tried, self.ratio, spans):
                return Refusal(kind="near_duplicate",
                               reason=f"near-duplicate of a tried patch {json.dumps(tried)[:160]}")
        return Admitted(ops=tuple(ops), patch_key=key, document=doc, hcp_hash=version)
