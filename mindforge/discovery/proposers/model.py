"""The model as proposer, through the harness's ``propose`` role.

The prompt is the HCP's ``prompts.propose`` followed by k reference tasks of
one family (prompt, entry point, reference, tests: the solver never sees
these, the proposer must) and the exact JSON shape wanted. The answer's first
JSON object becomes the candidate; the family, output kind and, for tool
tasks, the tools of the first example are carried over so the model only
writes what it can. An answer with no parsable object is still a candidate
(malformed), so that the rejection table counts what the model produced.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from mindforge.discovery.proposers.base import Proposal
from mindforge.tasks.models import Task


class ProposeRole(Protocol):
    """One ``propose`` hop: the harness's ``role("propose", prompt, seed=)`` answer text."""

    def __call__(self, prompt: str, seed: int) -> Awaitable[str]: ...


def _example(t: Task) -> str:
    shown = {"prompt": t.prompt, "entry_point": t.entry_point, "reference": t.reference,
             "tests": [x.code for x in t.tests]}
    return json.dumps(shown, ensure_ascii=False)


def build_prompt(instructions: str, examples: Sequence[Task]) -> str:
    fam = examples[0]
    lines = [instructions.strip(), "", f"Kind: {fam.family} ({fam.output_kind} answers)."]
    lines += [f"Example {i}: {_example(t)}" for i, t in enumerate(examples, 1)]
    lines += ["", ('New task as one JSON object with keys "prompt", "entry_point", "reference", "tests" '
                  "(a list of Python assert statements):")]
    return "\n".join(lines)


def pick_examples(pool: Sequence[Task], index: int, seed: int, k: int, families: Sequence[str]) -> list[Task]:
    rng = random.Random(f"{seed}|{index}|model")
    fams = sorted({t.family for t in pool if not families or t.family in families})
    if not fams:
        return []
    fam = fams[index % len(fams)]
    same = [t for t in pool if t.family == fam]
    return rng.sample(same, min(k, len(same)))


def first_json_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch == "{":
            try:
                obj, _ = decoder.raw_decode(text[i:])
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def to_candidate(obj: dict[str, Any], examples: Sequence[Task]) -> dict[str, Any]:
    """The proposer's object as a task dict, with the family's fixed parts from the first example."""
    base = examples[0]
    tests = obj.get("tests")
    if isinstance(tests, list):
        tests = [t if isinstance(t, dict) else {"name": f"check-{i}", "code": str(t)} for i, t in enumerate(tests, 1)]
    out = {"family": base.family, "output_kind": base.output_kind, "prompt": obj.get("prompt"),
           "reference": obj.get("reference"), "tests": tests,
           "entry_point": obj.get("entry_point") if base.output_kind == "function" else None}
    if base.output_kind == "tool_calls":
        out.update(tools=[t.model_dump() for t in base.tools], tool_impl=base.tool_impl)
        if isinstance(out["reference"], dict):
            out["reference"] = json.dumps(out["reference"])
    return out


async def propose(role: ProposeRole, instructions: str, pool: Sequence[Task], index: int, seed: int, k: int,
                  families: Sequence[str] = ()) -> Proposal:
    examples = pick_examples(pool, index, seed, k, families)
    if not examples:
        return Proposal(index=index, proposer="model", data=None, note="no reference tasks for the families")
    text = await role(build_prompt(instructions, examples), seed + index)
    obj = first_json_object(text)
    parents = tuple(t.id for t in examples)
    if obj is None:
        return Proposal(index=index, proposer="model", parents=parents, data=None, note=text[:2000])
    return Proposal(index=index, proposer="model", parents=parents, data=to_candidate(obj, examples),
                    harder_than_parent=False, note=text[:2000])
