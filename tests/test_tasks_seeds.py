"""The shipped seed set (mindforge/data/seed_tasks/*.jsonl): loads, meets the policy, gives nothing away.

Running every reference against its checker is the sandbox's test; these
checks need no execution.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mindforge.paths import seed_tasks_dir
from mindforge.tasks.io import iter_jsonl, load_tasks
from mindforge.tasks.models import Task
from mindforge.tasks.seeds import (
    MIN_SEED_TESTS,
    SEED_MINIMUMS,
    family_counts,
    leaked_reference_lines,
    seed_shortfalls,
    static_problems,
)

SEED_DIR = seed_tasks_dir()
SEED_FILES = sorted(SEED_DIR.glob("*.jsonl"))


@pytest.fixture(scope="module")
def seeds() -> list[Task]:
    # load_tasks raises on a malformed line and on an id used twice across files
    return load_tasks(SEED_DIR)


def test_there_are_seed_files() -> None:
    assert SEED_FILES, f"no *.jsonl in {SEED_DIR}"


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_seed_file_loads_and_every_task_is_sound(path: Path) -> None:
    problems = []
    for lineno, task in iter_jsonl(path, Task):
        problems += [f"{path.name}:{lineno} {task.id}: {p}" for p in static_problems(task)]
        if len(task.tests) < MIN_SEED_TESTS:
            problems.append(f"{path.name}:{lineno} {task.id}: only {len(task.tests)} tests")
        if task.provenance.source != "seed":
            problems.append(f"{path.name}:{lineno} {task.id}: source {task.provenance.source!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_seed_file_holds_one_family_named_in_its_file_name(path: Path) -> None:
    families = {task.family for _, task in iter_jsonl(path, Task)}
    assert len(families) == 1, f"{path.name} mixes families {sorted(families)}"
    assert path.name.startswith(families.pop() + "_")


def test_seed_counts_meet_the_minimums(seeds: list[Task]) -> None:
    counts = family_counts(seeds)
    have = ", ".join(f"{f}={sum(c.values())}" for f, c in counts.items())
    need = ", ".join(f"{f}>={n}" for f, n in SEED_MINIMUMS.items())
    shortfalls = seed_shortfalls(seeds)
    assert not shortfalls, f"seed set short: {'; '.join(shortfalls)} (have {have}; need {need})"


def test_l2_seeds_are_function_tasks_over_three_levels(seeds: list[Task]) -> None:
    l2 = [t for t in seeds if t.family == "L2"]
    assert len(l2) >= SEED_MINIMUMS["L2"]
    assert all(t.output_kind == "function" and t.entry_point for t in l2)
    levels = family_counts(l2)["L2"]
    # "about 20 each": no level may be a token gesture
    assert all(levels[d] >= 15 for d in (1, 2, 3)), dict(levels)
    assert levels[None] == 0, "every L2 seed states its difficulty"
    # harder tasks are tested more thoroughly
    mean = {
        d: sum(len(t.tests) for t in l2 if t.provenance.difficulty == d) / levels[d]
        for d in (1, 2, 3)
    }
    assert mean[3] > mean[1], mean


def test_entry_points_are_unique_within_l2_seeds(seeds: list[Task]) -> None:
    names = [t.entry_point for t in seeds if t.family == "L2"]
    assert len(names) == len(set(names))


def test_no_seed_needs_nondeterminism(seeds: list[Task]) -> None:
    assert [t.id for t in seeds if t.declares] == []


def test_leak_check_catches_a_prompt_that_quotes_the_reference(seeds: list[Task]) -> None:
    task = next(t for t in seeds if t.family == "L2")
    body = next(
        line.strip()
        for line in task.reference.splitlines()
        if len(line.strip()) >= 20 and not line.strip().startswith(("def ", "import "))
    )
    leaky = task.model_copy(update={"prompt": task.prompt + "\nHint: " + body})
    assert leaked_reference_lines(leaky) == [body]
    assert any("reference text" in p for p in static_problems(leaky))
