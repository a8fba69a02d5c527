"""Rules of an HCP document that JSON Schema cannot state.

Each rule returns ``(JSON pointer, message)`` pairs so that the loader can
report all of them at once. They run on the plain document, after the schema
has accepted it, so they may assume its shape.
"""

from __future__ import annotations

from typing import Any

import jsonpointer

GUARDED_PREFIX = "/guarded"


def under_guarded(pointer: str) -> bool:
    """Whether a JSON pointer names ``/guarded`` or anything inside it."""
    return pointer == GUARDED_PREFIX or pointer.startswith(GUARDED_PREFIX + "/")


def _duplicates(values: list[str]) -> set[str]:
    seen: set[str] = set()
    return {v for v in values if v in seen or seen.add(v)}  # type: ignore[func-returns-value]


def _unique_adapters(doc: dict[str, Any]) -> list[tuple[str, str]]:
    routes = doc["router"]["routes"]
    out = []
    for field in ("adapter", "served_adapter"):
        dup = _duplicates([routes[r][field] for r in sorted(routes)])
        for r in sorted(routes):
            if routes[r][field] in dup:
                out.append(
                    (
                        f"/router/routes/{r}/{field}",
                        f"{field} {routes[r][field]!r} is used by more than one route; expected unique names",
                    )
                )
    return out


def _unique_names(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for i in sorted(_index_of_dups([s["name"] for s in doc["skills"]])):
        out.append((f"/skills/{i}/name", f"skill name {doc['skills'][i]['name']!r} is not unique"))
    names = [t["function"]["name"] for t in doc["tools"]]
    for i in sorted(_index_of_dups(names)):
        out.append((f"/tools/{i}/function/name", f"tool name {names[i]!r} is not unique"))
    return out


def _index_of_dups(values: list[str]) -> list[int]:
    dup = _duplicates(values)
    return [i for i, v in enumerate(values) if v in dup]


def _tunables(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for i, t in enumerate(doc["tunable"]):
        where = f"/tunable/{i}"
        if under_guarded(t["path"]):
            out.append((f"{where}/path", "a tunable range may not point into /guarded"))
            continue
        try:
            value = jsonpointer.resolve_pointer(doc, t["path"])
        except jsonpointer.JsonPointerException:
            out.append((f"{where}/path", f"{t['path']} does not exist in the document"))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append((f"{where}/path", f"{t['path']} is not a number"))
            continue
        if t["integer"] and not all(float(x).is_integer() for x in (t["min"], t["max"], value)):
            out.append(
                (
                    f"{where}/integer",
                    f"integer range, but min, max or the value of {t['path']} is not a whole number",
                )
            )
        if t["min"] > t["max"]:
            out.append((f"{where}/min", f"min {t['min']} is greater than max {t['max']}"))
        elif not t["min"] <= value <= t["max"]:
            out.append(
                (
                    f"{where}",
                    f"current value {value} of {t['path']} is outside [{t['min']}, {t['max']}]",
                )
            )
    return out


def _prefills(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """A ``prefill_answer`` hook starts the answer, so it fires before it and once a route."""
    out, seen = [], {}
    routes = sorted(doc["router"]["routes"])
    for i, h in enumerate(doc["hooks"]):
        if h["action"] != "prefill_answer":
            continue
        if h["event"] != "before_answer":
            out.append((f"/hooks/{i}/event", f"a prefill_answer hook fires at before_answer, not {h['event']}"))
        for r in h["routes"] or routes:
            if r in seen:
                why = f"route {r} already has a prefill_answer hook (/hooks/{seen[r]}); expected at most one a route"
                out.append((f"/hooks/{i}/routes", why))
            seen.setdefault(r, i)
    return out


def semantic_problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """All cross-field problems of a schema-valid document, in a stable order."""
    return _unique_adapters(doc) + _unique_names(doc) + _tunables(doc) + _prefills(doc)
