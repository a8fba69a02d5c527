"""`mindforge tasks validate | stats | show` on small files written here and on the seeds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mindforge.cli import app
from mindforge.paths import seed_tasks_dir
from mindforge.tasks.io import dump_jsonl
from mindforge.tasks.models import CheckerTest, Provenance, Task


def run(*args: str | Path):
    return CliRunner().invoke(app, ["tasks", *map(str, args)])


def task(name: str, reference: str | None = None, difficulty: int | None = 2) -> Task:
    return Task(
        family="L2",
        prompt=f"Write a Python function `{name}(s: str) -> str` returning s reversed.",
        output_kind="function",
        entry_point=name,
        tests=(
            CheckerTest(name="a", code=f"assert {name}('ab') == 'ba'"),
            CheckerTest(name="b", code=f"assert {name}('') == ''"),
            CheckerTest(name="c", code=f"assert {name}('xyz') == 'zyx'"),
        ),
        reference=reference or f"def {name}(s):\n    return s[::-1]\n",
        provenance=Provenance(source="seed", difficulty=difficulty),
    )


def test_validate_accepts_the_seed_folder() -> None:
    result = run("validate", seed_tasks_dir())
    assert result.exit_code == 0, result.output
    assert "ok " in result.stdout and "L2_python.jsonl" in result.stdout


def test_validate_reports_each_problem_with_file_and_line(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    dump_jsonl([task("rev")], good)
    wrong_entry = tmp_path / "wrong.jsonl"
    dump_jsonl([task("flip"), task("back", reference="def other(s):\n    return s\n")], wrong_entry)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(task("turn").model_dump_json() + "\n" + '{"family": "L2"\n')
    dup = tmp_path / "dup.jsonl"
    dump_jsonl([task("rev")], dup)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    result = run("validate", good, wrong_entry, broken, dup, binary, tmp_path / "absent.jsonl")
    assert result.exit_code == 2
    err = result.stderr
    assert f"{wrong_entry}:2: " in err and "does not define the entry point 'back'" in err
    assert f"{broken}:2: not valid JSON" in err
    assert f"{dup}:1: duplicate task" in err and f"first at {good}:1" in err
    assert "absent.jsonl: cannot read" in err
    assert f"{binary}: not UTF-8 text" in err
    assert f"ok {good}: 1 tasks" in result.stdout
    assert f"ok {wrong_entry}" not in result.stdout


def test_stats_counts_by_family_and_difficulty(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    dump_jsonl([task("a", difficulty=1), task("b", difficulty=3), task("c", difficulty=3)], path)
    result = run("stats", path)
    assert result.exit_code == 0, result.output
    l2 = next(line for line in result.stdout.splitlines() if line.startswith("L2"))
    assert l2.split() == ["L2", "3", "1", "0", "2", "0"]
    assert "total 3 tasks, 9 checker tests" in result.stdout


def test_show_lists_and_prints_one_task(tmp_path: Path) -> None:
    tasks = [task("alpha"), task("beta")]
    path = tmp_path / "t.jsonl"
    dump_jsonl(tasks, path)
    listing = run("show", path)
    assert listing.exit_code == 0
    assert [line.split()[0] for line in listing.stdout.splitlines()] == [t.id for t in tasks]
    full = run("show", path, "--id", tasks[1].id[:10])
    assert json.loads(full.stdout)["reference"] == tasks[1].reference
    solver = json.loads(run("show", path, "--id", tasks[1].id, "--solver").stdout)
    assert "reference" not in solver and "tests" not in solver
    assert solver["entry_point"] == "beta"
    missing = run("show", path, "--id", "t-nothing")
    assert missing.exit_code == 2 and "no task with id starting" in missing.stderr
