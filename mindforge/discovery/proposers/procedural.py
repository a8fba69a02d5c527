"""Procedural proposers: new tasks from the seed and archive pool without a model.

- ``instruction`` / ``function``: generated tasks (see ``instructions``);
- ``compose``: two tasks of one family asked for together (L2: both
  functions; L3: both widgets in one document); tests are the union, so the
  composition is harder than either parent, and each parent's reference
  alone must fail (checked as decoys);
- ``bugfix``: a function's reference with one syntax-tree mutation (a
  comparison flipped, an arithmetic operator swapped, a constant moved by
  one) shown to the solver to fix; the mutant must fail the original tests,
  or the "bug" changes nothing and the task is rejected as non-discriminating.

Everything is drawn from ``random.Random(seed, index)``, so candidate ``i``
is the same on a rerun.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence

from mindforge.discovery.proposers.base import Proposal
from mindforge.discovery.proposers.instructions import (
    LEVELS,
    VARIANT_LEVEL,
    function_task,
    instruction_task,
    ui_task,
)
from mindforge.tasks.models import Task

KINDS = ("instruction", "function", "ui", "compose", "bugfix")
# One pass of the schedule: generated kinds (with a difficulty dial, see ``LEVELLED``) in every family a
# small model can meet, and the pool-derived kinds (bugfix, compose) kept for stronger models.
SCHEDULE = ("function", "instruction", "ui", "function", "bugfix", "instruction", "ui", "compose")
FAMILY_OF = {"instruction": ("L0",), "function": ("L2",), "ui": ("L3",), "compose": ("L2", "L3"), "bugfix": ("L2",)}
LEVELLED = {"instruction": instruction_task, "function": function_task, "ui": ui_task}

_SWAPS: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                            ast.NotEq: ast.Eq, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv}


def variants(kind: str) -> dict[str, int]:
    """A generated kind's variants and the level of each: every function generator; for the instruction and UI
    kinds, their levels (each level one generator)."""
    if kind == "function":
        return dict(VARIANT_LEVEL)
    return {f"level{n}": n for n in range(1, LEVELS + 1)} if kind in LEVELLED else {}


def kinds_for(families: Sequence[str]) -> list[str]:
    allowed = [k for k in SCHEDULE if not families or set(FAMILY_OF[k]) & set(families)]
    return allowed


def rng_for(seed: int, index: int, salt: str = "") -> random.Random:
    """The generator for candidate ``index``'s ``salt`` draw: the same on every rerun."""
    return random.Random(f"{seed}|{index}|{salt}")


def mutation_sites(tree: ast.AST) -> list[ast.AST]:
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAPS or isinstance(node, ast.BinOp) and type(node.op) in _SWAPS or isinstance(node, ast.Constant) and type(node.value) is int:
            out.append(node)
    return out


def mutate(source: str, rng: random.Random) -> str | None:
    """``source`` with one mutation at a drawn site, or None when it has no site."""
    tree = ast.parse(source)
    sites = mutation_sites(tree)
    if not sites:
        return None
    node = rng.choice(sites)
    if isinstance(node, ast.Compare):
        node.ops[0] = _SWAPS[type(node.ops[0])]()
    elif isinstance(node, ast.BinOp):
        node.op = _SWAPS[type(node.op)]()
    else:
        node.value = node.value + rng.choice((-1, 1))  # type: ignore[attr-defined]
    return ast.unparse(tree) + "\n"


def bugfix(pool: Sequence[Task], index: int, seed: int) -> Proposal | None:
    funcs = [t for t in pool if t.output_kind == "function"]
    if not funcs:
        return None
    rng = rng_for(seed, index, "bugfix")
    for _ in range(8):
        parent = rng.choice(funcs)
        buggy = mutate(parent.reference, rng)
        if buggy is None or ast.dump(ast.parse(buggy)) == ast.dump(ast.parse(parent.reference)):
            continue
        prompt = (f"The Python function `{parent.entry_point}` below has exactly one bug. It should do this:\n\n"
                  f"{parent.prompt}\n\n```python\n{buggy}```\n\nReply with the whole corrected function.")
        data = {**_function_view(parent), "prompt": prompt}
        return Proposal(index=index, proposer="procedural/bugfix", parents=(parent.id,), data=data,
                        decoys=(buggy,), harder_than_parent=False)
    return None


def _function_view(t: Task) -> dict:
    return {"family": t.family, "output_kind": t.output_kind, "entry_point": t.entry_point, "prompt": t.prompt,
            "tests": [x.model_dump() for x in t.tests], "reference": t.reference, "setup": t.setup,
            "declares": list(t.declares)}


def compose(pool: Sequence[Task], index: int, seed: int, families: Sequence[str]) -> Proposal | None:
    rng = rng_for(seed, index, "compose")
    fams = [f for f in ("L2", "L3") if not families or f in families]
    if not fams:
        return None
    fam = fams[index % len(fams)]
    cands = [t for t in pool if t.family == fam and t.output_kind in ("function", "html") and not t.tools]
    if len(cands) < 2:
        return None
    a, b = rng.sample(cands, 2)
    if fam == "L2" and a.entry_point == b.entry_point:
        return None
    tests = [{"name": f"a-{t.name}", "code": t.code} for t in a.tests] + \
            [{"name": f"b-{t.name}", "code": t.code} for t in b.tests]
    if fam == "L2":
        prompt = f"Write both Python functions below in one module.\n\n1. {a.prompt}\n\n2. {b.prompt}"
        data = {"family": "L2", "output_kind": "function", "entry_point": a.entry_point, "prompt": prompt,
                "tests": tests, "reference": a.reference.rstrip() + "\n\n\n" + b.reference,
                "setup": "\n".join(x for x in (a.setup, b.setup) if x),
                "declares": sorted(set(a.declares) | set(b.declares))}  # a parent's clock or randomness stays declared
    else:
        prompt = f"Build one HTML fragment that contains both of these.\n\n1. {a.prompt}\n\n2. {b.prompt}"
        data = {"family": "L3", "output_kind": "html", "prompt": prompt, "tests": tests,
                "reference": a.reference + "\n" + b.reference}
    return Proposal(index=index, proposer="procedural/compose", parents=(a.id, b.id), data=data,
                    decoys=(a.reference, b.reference), harder_than_parent=True)


def propose(kind: str, pool: Sequence[Task], index: int, seed: int, families: Sequence[str] = (),
            attempt: int = 0, variant: str | None = None) -> Proposal:
    """Candidate ``index`` of ``kind`` (``variant``: a generated kind's generator, drawn when None; ``attempt``
    redraws); a generated task when the pool lacks material for a pool-derived kind."""
    out: Proposal | None = None
    seed = seed if attempt == 0 else hash((seed, attempt)) & 0xFFFFFFF
    if kind == "bugfix":
        out = bugfix(pool, index, seed)
    elif kind == "compose":
        out = compose(pool, index, seed, families)
    if out is not None:
        return out
    if kind not in LEVELLED:
        kind = next((k for k in ("function", "instruction", "ui") if not families or set(FAMILY_OF[k]) & set(families)),
                    "instruction")
        variant = None
    rng = rng_for(seed, index, kind)
    options = variants(kind)
    if variant not in options:
        variant = rng.choice(sorted(options))
    level = options[variant]
    data = function_task(rng, level, variant) if kind == "function" else LEVELLED[kind](rng, level)
    return Proposal(index=index, proposer=f"procedural/{kind}", level=level, variant=variant, data=data)
