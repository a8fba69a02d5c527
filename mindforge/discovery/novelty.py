"""Novelty: exact duplicates by a normalized syntax-tree hash, near-duplicates by n-gram Jaccard.

The syntax-tree hash renames every identifier, argument and attribute to its
first-seen position and drops docstrings, so a reference that differs from an
archived one only in names or formatting hashes the same. Text references
(instructions, HTML) are normalized by case and whitespace instead.

Near-duplicates compare word 3-gram sets of "prompt + tests" (Jaccard). The
archive is small (hundreds to thousands of tasks), so an exact pairwise scan
is cheap and has none of MinHash's false negatives.

Decontamination compares a candidate's prompt with the prompts of the sealed
evaluation sets by word 3-gram containment (the share of the candidate's
n-grams found in one evaluation prompt), which also catches a task that
copies an evaluation prompt and adds a sentence.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from mindforge.tasks.models import Task

_WORD = re.compile(r"[a-z0-9_]+")


class _Rename(ast.NodeTransformer):
    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _n(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._n(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._n(node.arg)
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._n(node.name)
        node.returns = None
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                            ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node


_CODE = re.compile(r"```[A-Za-z0-9_+-]*\n(.*?)```", re.DOTALL)


def _normal_code(text: str) -> str:
    try:
        return ast.dump(_Rename().visit(ast.parse(text)), annotate_fields=False, include_attributes=False)
    except SyntaxError:
        return " ".join(text.split())


def structure_hash(task: Task) -> str:
    """Hash of the reference (and of any code the prompt hands the solver) with names and layout normalized.

    Code shown in the prompt is part of a task's identity: a "fix the bug" task
    shares its parent's reference by design, and differs by the bug shown.
    """
    ref = _normal_code(task.reference) if task.output_kind == "function" else " ".join(task.reference.lower().split())
    shown = "|".join(_normal_code(c) for c in _CODE.findall(task.prompt))
    return hashlib.sha256(f"{task.family}|{ref}|{shown}".encode()).hexdigest()[:20]


def shingles(text: str, n: int = 3) -> frozenset[str]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))


def task_shingles(task: Task) -> frozenset[str]:
    return shingles(task.prompt + "\n" + "\n".join(t.code for t in task.tests))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of ``a``'s shingles found in ``b``."""
    return len(a & b) / len(a) if a else 0.0


class NoveltyIndex:
    """The archive as seen by the novelty checks; ``add`` makes an accepted task count for later ones."""

    def __init__(self, archive: Iterable[Task] = (), eval_prompts: Iterable[str] = ()):
        self.hashes: dict[str, str] = {}
        self.sets: list[tuple[str, frozenset[str]]] = []
        self.eval_sets = [s for s in (shingles(p) for p in eval_prompts) if s]
        for t in archive:
            self.add(t)

    def add(self, task: Task) -> None:
        self.hashes.setdefault(structure_hash(task), task.id)
        self.sets.append((task.id, task_shingles(task)))

    def duplicate_of(self, task: Task, threshold: float) -> tuple[str, float] | None:
        """(archived id, similarity) of the closest duplicate, or None."""
        h = self.hashes.get(structure_hash(task))
        if h is not None:
            return h, 1.0
        mine = task_shingles(task)
        best = max(((tid, jaccard(mine, s)) for tid, s in self.sets), key=lambda x: x[1],
                   default=None)
        if best is not None and best[1] >= threshold:
            return best
        return None

    def contamination(self, task: Task, threshold: float) -> float | None:
        """The highest containment of the prompt in an evaluation prompt, when at or above ``threshold``."""
        mine = shingles(task.prompt)
        best = max((containment(mine, s) for s in self.eval_sets), default=0.0)
        return best if best >= threshold else None


def eval_prompts(paths: Iterable[Path]) -> list[str]:
    """Prompts of evaluation datasets: JSON/JSONL files (or folders of them) with a text/prompt field."""
    out: list[str] = []
    for p in paths:
        p = Path(p)
        files = sorted(f for f in p.rglob("*") if f.suffix in (".jsonl", ".json")) if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                out.extend(_prompts_in(f))
    return out


def _prompts_in(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" \
            else json.loads(text)
    except ValueError:
        return []
    rows = rows if isinstance(rows, list) else [rows]
    out = []
    for r in rows:
        if isinstance(r, dict):
            for key in ("prompt", "text", "question", "problem"):
                if isinstance(r.get(key), str):
                    out.append(r[key])
                    break
    return out
