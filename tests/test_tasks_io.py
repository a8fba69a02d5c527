"""JSONL task files: round trip, content ids, and errors that name file:line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mindforge.errors import InputError
from mindforge.tasks.io import dump_jsonl, load_tasks
from mindforge.tasks.models import CheckerTest, Provenance, Task


def make_task(name: str = "double", difficulty: int = 1) -> Task:
    return Task(
        family="L2",
        prompt=f"Write a Python function `{name}(x: int) -> int` returning 2 * x.",
        output_kind="function",
        entry_point=name,
        tests=tuple(
            CheckerTest(name=f"{name}-{i}", code=f"assert {name}({i}) == {2 * i}")
            for i in (1, 2, 3)
        ),
        reference=f"def {name}(x):\n    return 2 * x\n",
        provenance=Provenance(source="seed", difficulty=difficulty),
    )


def test_round_trip_keeps_tasks_and_ids(tmp_path: Path) -> None:
    tasks = [make_task("double"), make_task("twice")]
    path = tmp_path / "t.jsonl"
    assert dump_jsonl(tasks, path) == 2
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [t.id for t in tasks]
    assert load_tasks(path) == tasks


def test_id_depends_on_content_not_provenance() -> None:
    assert make_task(difficulty=1).id == make_task(difficulty=3).id
    assert make_task("double").id != make_task("twice").id


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(make_task().model_dump_json() + "\n\n{not json\n")
    with pytest.raises(InputError) as info:
        load_tasks(path)
    assert info.value.source == str(path)
    assert info.value.where == "3"  # blank lines still count
    assert str(info.value).startswith(f"{path}:3: not valid JSON")


def test_bad_field_names_file_line_and_field(tmp_path: Path) -> None:
    record = make_task().model_dump(mode="json")
    record["family"] = "L9"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(InputError) as info:
        load_tasks(path)
    assert info.value.where == "1"
    assert "/family" in info.value.problem


def test_missing_entry_point_of_a_function_task_is_rejected(tmp_path: Path) -> None:
    record = make_task().model_dump(mode="json")
    del record["id"]
    record["entry_point"] = None
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(InputError, match="entry_point"):
        load_tasks(path)


def test_edited_record_with_a_stale_id_is_rejected(tmp_path: Path) -> None:
    record = make_task().model_dump(mode="json")
    record["prompt"] += " Edited."
    path = tmp_path / "stale.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(InputError, match="does not match the content"):
        load_tasks(path)


def test_duplicate_task_across_files_is_rejected(tmp_path: Path) -> None:
    dump_jsonl([make_task()], tmp_path / "a.jsonl")
    dump_jsonl([make_task("twice"), make_task()], tmp_path / "b.jsonl")
    with pytest.raises(InputError) as info:
        load_tasks(tmp_path)
    assert info.value.source.endswith("b.jsonl") and info.value.where == "2"
    assert "duplicate" in info.value.problem
