"""Run directory, atomic writes, parquet shards readable by `datasets`."""

from __future__ import annotations

import json

import pytest

from mindforge.paths import seed_tasks_dir
from mindforge.store import (
    RunDir,
    atomic_write_json,
    atomic_write_text,
    read_parquet,
    write_parquet,
)
from mindforge.tasks import Hop, Task, Trajectory, Verdict
from mindforge.tasks.io import load_tasks


def test_tasks_round_trip_through_parquet_and_datasets(tmp_path):
    tasks = load_tasks(seed_tasks_dir())
    folder = tmp_path / "cycles" / "1" / "discovery" / "tasks"
    write_parquet(tasks, folder / "part-0.parquet")
    assert read_parquet(folder, Task) == tasks
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(folder / "*.parquet"), split="train")
    assert len(ds) == len(tasks)
    assert set(ds["family"]) == {"L0", "L1", "L2", "L3"}
    assert ds[0]["id"] == tasks[0].id
    assert json.loads(ds[0]["tests"])[0]["name"] == tasks[0].tests[0].name


def test_trajectories_keep_engine_ids_exactly(tmp_path):
    hop = Hop(kind="answer", route="L2", adapter="mf-L2-v0000", prompt_ids=(1, 2, 3),
              completion_ids=(4, 5), logprobs=(-0.5, -1.25), text="x")
    verdict = Verdict(task_id="t-1", status="pass")
    traj = Trajectory(task_id="t-1", hcp_version="h-1", route="L2", hops=(hop,), verdict=verdict, reward=1.0)
    path = write_parquet([traj], tmp_path / "traj.parquet")
    (back,) = read_parquet(path, Trajectory)
    assert back == traj and back.hops[0].completion_ids == (4, 5) and back.id == traj.id


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "result.json"
    atomic_write_json(target, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_text(target, None)  # type: ignore[arg-type]
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_stale_content_id_is_refused():
    task = load_tasks(seed_tasks_dir())[0]
    doc = task.model_dump(mode="json")
    doc["prompt"] += " (edited)"
    with pytest.raises(ValueError, match="does not match the content"):
        Task.model_validate(doc)


def test_run_dir_stage_markers(tmp_path):
    run = RunDir(tmp_path)
    assert run.cycles() == [] and not run.is_done(1, "discovery")
    run.mark_done(1, "discovery", {"accepted": 3})
    assert run.is_done(1, "discovery") and run.cycles() == [1]
    with pytest.raises(ValueError, match="unknown stage"):
        run.stage(1, "training")
