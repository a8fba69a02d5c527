"""Differences between two HCP documents: changed pointers and a unified diff.

The pointer list is what a reviewer or an acceptance rule reasons about
("only /system/L2 changed"); the unified diff of the pretty canonical text is
what a person reads (the Prefect markdown artifact shows it). Both are
deterministic: keys sorted, arrays compared index by index, and numbers
compared after canonicalisation (``1`` and ``1.0`` are the same value).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from mindforge.hcp.canonical import canonical_json, hcp_hash, pretty_json


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def changed_pointers(a: Any, b: Any, at: str = "") -> list[str]:
    """JSON pointers where ``a`` and ``b`` differ, most specific first-level-down.

    A key present on one side only, a type change, or a changed scalar is
    reported at its own pointer; arrays of different lengths report the
    indices past the shorter one.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            here = f"{at}/{_escape(key)}"
            if key not in a or key not in b:
                out.append(here)
            else:
                out.extend(changed_pointers(a[key], b[key], here))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b):
                out.append(f"{at}/{i}")
            else:
                out.extend(changed_pointers(a[i], b[i], f"{at}/{i}"))
        return out
    same = type(a) is type(b) and a == b
    return [] if same else [at or "/"]


class HCPDiff(BaseModel):
    """The difference between two documents; ``old_hash``/``new_hash`` are their versions."""

    model_config = ConfigDict(frozen=True)

    old_hash: str
    new_hash: str
    paths: tuple[str, ...]
    unified: str

    @property
    def changed(self) -> bool:
        return bool(self.paths)

    def markdown(self) -> str:
        """For a Prefect artifact or a review: versions, pointers, fenced diff."""
        if not self.paths:
            return f"No change ({self.old_hash})."
        lines = [f"**{self.old_hash} → {self.new_hash}**", "", "Changed:"]
        lines += [f"- `{p}`" for p in self.paths]
        return "\n".join(lines + ["", "```diff", self.unified.rstrip("\n"), "```"])


def diff_documents(a: Any, b: Any, a_name: str = "a", b_name: str = "b") -> HCPDiff:
    """Diff two documents (dicts or HCP models) as pointers and as unified text."""
    ca, cb = json.loads(canonical_json(a)), json.loads(canonical_json(b))
    text = "".join(
        difflib.unified_diff(
            pretty_json(ca).splitlines(keepends=True),
            pretty_json(cb).splitlines(keepends=True),
            fromfile=a_name,
            tofile=b_name,
        )
    )
    return HCPDiff(
        old_hash=hcp_hash(ca),
        new_hash=hcp_hash(cb),
        paths=tuple(changed_pointers(ca, cb)),
        unified=text,
    )
