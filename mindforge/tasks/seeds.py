"""Static checks of task files and the seed-set policy.

Everything here is judged WITHOUT running task code: whether the Python a
task carries compiles, whether a function task's reference defines its entry
point, whether the prompt gives the reference away. Running references
against their checkers is the sandbox's job (``mindforge.sandbox``), because
that code is untrusted in general.

Seed policy (DESIGN.md, issue 2): the shipped seed set has at least
``SEED_MINIMUMS`` tasks per family, L2 spread over three difficulty levels,
and each seed task at least ``MIN_SEED_TESTS`` checker tests so that a
constant answer cannot pass.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable

from mindforge.tasks.models import ROUTES, Task

SEED_MINIMUMS: dict[str, int] = {"L0": 15, "L1": 15, "L2": 60, "L3": 10}
SEED_L2_DIFFICULTIES: tuple[int, ...] = (1, 2, 3)
MIN_SEED_TESTS = 3

# Reference lines shorter than this are too generic to count as a leak
# (``return out``, ``i += 1`` may well appear in a prompt's example).
_LEAK_MIN_CHARS = 20
# A prompt states the signature, so the reference's def/import lines may appear in it.
_LEAK_EXEMPT_PREFIXES = ("def ", "async def ", "import ", "from ", "class ")


def static_problems(task: Task) -> list[str]:
    """What is wrong with a task that can be seen without running it; [] when nothing."""
    problems: list[str] = []
    names = Counter(t.name for t in task.tests)
    problems += [f"test name {n!r} is used {c} times" for n, c in names.items() if c > 1]
    for test in task.tests:
        problems += _compile_problems(test.code, f"test {test.name!r}")
    problems += _compile_problems(task.setup, "setup")
    problems += _compile_problems(task.tool_impl, "tool_impl")
    if task.output_kind == "function":
        ref_problems = _compile_problems(task.reference, "reference")
        problems += ref_problems
        if not ref_problems and task.entry_point not in top_level_names(task.reference):
            problems.append(
                f"reference does not define the entry point {task.entry_point!r} at top level"
            )
    leaks = leaked_reference_lines(task)
    if leaks:
        problems.append(f"prompt contains reference text: {leaks[0]!r}")
    return problems


def leaked_reference_lines(task: Task) -> list[str]:
    """Reference text that appears verbatim in the prompt.

    For code, any non-trivial line of the reference (signature and import lines
    excepted); for other kinds (a final text, an HTML page) the whole reference.
    """
    if task.output_kind != "function":
        ref = task.reference.strip()
        return [ref] if len(ref) >= _LEAK_MIN_CHARS and ref in task.prompt else []
    leaks = []
    for line in task.reference.splitlines():
        line = line.strip()
        if (
            len(line) >= _LEAK_MIN_CHARS
            and not line.startswith(_LEAK_EXEMPT_PREFIXES)
            and line in task.prompt
        ):
            leaks.append(line)
    return leaks


def top_level_names(code: str) -> set[str]:
    """Names a module binds at top level by def, class or simple assignment."""
    names: set[str] = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def family_counts(tasks: Iterable[Task]) -> dict[str, Counter[int | None]]:
    """Per family, how many tasks at each difficulty (None when not given)."""
    counts: dict[str, Counter[int | None]] = {route: Counter() for route in ROUTES}
    for task in tasks:
        counts[task.family][task.provenance.difficulty] += 1
    return counts


def seed_shortfalls(tasks: Iterable[Task]) -> list[str]:
    """How a seed set falls short of the policy, one readable line each; [] when it meets it."""
    tasks = list(tasks)
    counts = family_counts(tasks)
    out = []
    for route, minimum in SEED_MINIMUMS.items():
        have = sum(counts[route].values())
        if have < minimum:
            out.append(f"{route}: {have} tasks, need at least {minimum}")
    missing = [d for d in SEED_L2_DIFFICULTIES if not counts["L2"][d]]
    if missing:
        out.append(f"L2: no task at difficulty {', '.join(map(str, missing))}")
    few = [t.id for t in tasks if len(t.tests) < MIN_SEED_TESTS]
    if few:
        out.append(f"{len(few)} tasks have fewer than {MIN_SEED_TESTS} tests: {', '.join(few[:5])}")
    return out


def _compile_problems(code: str, what: str) -> list[str]:
    if not code:
        return []
    try:
        compile(code, f"<{what}>", "exec")
    except SyntaxError as exc:
        return [f"{what} is not valid Python (line {exc.lineno}): {exc.msg}"]
    return []
