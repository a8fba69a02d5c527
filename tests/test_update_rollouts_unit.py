"""Scoring pieces of the rollouts: candidates, rewards, statistics, task split. No model needed."""

from __future__ import annotations

import json
import math

from mindforge.paths import seed_tasks_dir as seed_dir
from mindforge.rollouts import (
    candidate_for,
    fenced_block,
    groups_for_training,
    paired_se,
    reward_of,
    reward_stats,
)
from mindforge.store import RunDir, read_parquet, write_parquet
from mindforge.tasks.models import (
    CheckerTest,
    Task,
    ToolSpec,
    Trajectory,
    Verdict,
    VerdictStatus,
)
from mindforge.tasks.models import (
    TestOutcome as Outcome,
)
from mindforge.tasks.models import (
    TestResult as Result,
)
from mindforge.update.inputs import cycle_tasks, split


def _task(kind: str = "function", **kw) -> Task:
    base = {"family": "L2", "prompt": "p", "output_kind": kind, "tests": [CheckerTest(name="a", code="pass")],
            "reference": "def f(): pass", "entry_point": "f" if kind == "function" else None}
    return Task(**{**base, **kw})


def test_candidates_by_output_kind() -> None:
    answer = "Here:\n```python\ndef f():\n    return 1\n```\nand ```html\n<p>x</p>\n```"
    assert candidate_for(_task(), answer, []) == "def f():\n    return 1\n"
    assert candidate_for(_task(), "def f(): return 2", []) == "def f(): return 2"
    assert candidate_for(_task("html"), answer, []) == "<p>x</p>\n"
    assert candidate_for(_task("text"), "just text", []) == "just text"
    calls = [{"name": "get", "arguments": {"k": 1}, "result": 5}]
    tool_task = _task("tool_calls", family="L1", tools=[ToolSpec(name="get")], tool_impl="def get(state, k): ...")
    assert json.loads(candidate_for(tool_task, "five", calls)) == {
        "calls": [{"name": "get", "arguments": {"k": 1}}], "answer": "five"}
    assert fenced_block("```\nplain\n```", ("python",)) == "plain\n"
    assert fenced_block("```python\nunterminated", ("python",)) == "unterminated"


def test_rewards_never_score_infra_errors() -> None:
    tests = (Result(name="a", outcome=Outcome.PASS), Result(name="b", outcome=Outcome.FAIL),
             Result(name="c", outcome=Outcome.FAIL), Result(name="d", outcome=Outcome.PASS))
    fail = Verdict(task_id="t", status=VerdictStatus.FAIL, tests=tests)
    assert reward_of(fail, "binary") == 0.0 and reward_of(fail, "pass_fraction") == 0.5
    ok = Verdict(task_id="t", status=VerdictStatus.PASS, tests=tests[:1])
    assert reward_of(ok, "binary") == 1.0 == reward_of(ok, "pass_fraction")
    infra = Verdict(task_id="t", status=VerdictStatus.INFRA_ERROR)
    assert reward_of(infra, "binary") is None and reward_of(infra, "pass_fraction") is None


def _traj(task: str, sample: int, reward: float | None) -> Trajectory:
    return Trajectory(task_id=task, hcp_version="h", route="L2", sample=sample, reward=reward,
                      meta={} if reward is not None else {"dropped": "infra_error"})


def test_stats_treat_tasks_as_the_unit_and_drop_infra() -> None:
    groups = [[_traj("a", 0, 1.0), _traj("a", 1, 0.0)], [_traj("b", 0, 0.0), _traj("b", 1, None)],
              [_traj("c", 0, None)]]
    s = reward_stats(groups)
    assert (s.tasks, s.samples, s.dropped) == (2, 3, 2)
    assert s.per_task == {"a": 0.5, "b": 0.0} and math.isclose(s.mean, 0.25)
    assert math.isclose(s.se, math.sqrt(((0.25**2) * 2) / 1 / 2))
    after = reward_stats([[_traj("a", 0, 1.0)], [_traj("b", 0, 1.0)]])
    assert math.isclose(paired_se(s, after), 0.25)  # diffs 0.5 and 1.0
    # Training sees scored samples with hops only.
    assert groups_for_training(groups) == []


def test_trajectories_round_trip_parquet(tmp_path) -> None:
    rows = [_traj("a", 0, 1.0), _traj("a", 1, None)]
    write_parquet(rows, tmp_path / "x.parquet")
    assert read_parquet(tmp_path, Trajectory) == rows


def test_split_is_stable_and_falls_back_to_seeds(tmp_path) -> None:
    tasks, source = cycle_tasks(RunDir(tmp_path), 1, "L2")
    assert source.endswith("seed_tasks") and tasks and all(t.family == "L2" for t in tasks)
    train, val = split(tasks, 4, seed=3)
    assert len(val) == 4 and not {t.id for t in train} & {t.id for t in val}
    assert split(list(reversed(tasks)), 4, seed=3)[1] == val
    # Discovery output for the cycle wins when it has tasks of the route.
    write_parquet(tasks[:3], RunDir(tmp_path).stage(1, "discovery") / "tasks" / "a.parquet")
    found, source = cycle_tasks(RunDir(tmp_path), 1, "L2")
    assert [t.id for t in found] == [t.id for t in tasks[:3]] and source.endswith("tasks")
    # ... joined by the family's seeds when it has fewer than a split needs
    found, source = cycle_tasks(RunDir(tmp_path), 1, "L2", want=6)
    assert [t.id for t in found[:3]] == [t.id for t in tasks[:3]] and len(found) == len(tasks)
    assert source.endswith("(3 tasks) and " + str(seed_dir()))


def _measured(task, rate):
    prov = task.provenance.model_copy(update={"source": "discovery", "extra": {"solve_rate": rate}})
    return task.model_copy(update={"provenance": prov})


def test_validation_holds_out_learnable_tasks_in_proportion_and_rft_attempts_them_first(tmp_path) -> None:
    from mindforge.update.inputs import learnable
    from mindforge.update.rft import attempted

    seeds, _ = cycle_tasks(RunDir(tmp_path), 1, "L2")
    # Six tasks Discovery measured inside the band, two it measured at the edges (never kept as learnable).
    measured = [_measured(t, 0.5) for t in seeds[:6]] + [_measured(seeds[6], 0.0), _measured(seeds[7], 1.0)]
    tasks = measured + seeds[8:38]
    train, held = split(tasks, 8, seed=0)
    assert len(held) == 8 and sum(map(learnable, held)) == 1  # 8 * 6/38 rounds to 1
    assert all(learnable(t) for t in train[:5]) and not any(learnable(t) for t in train[5:])
    assert split(list(reversed(tasks)), 8, seed=0) == (train, held)
    first, second = attempted(train, 10, cycle=1), attempted(train, 10, cycle=2)
    assert [t.id for t in first[:5]] == [t.id for t in train[:5]] == [t.id for t in second[:5]]
    assert {t.id for t in first[5:]}.isdisjoint(t.id for t in second[5:])  # the unmeasured window moves
    assert len(attempted(train, None, cycle=1)) == len(train)
    # No learnable task at all: the old behaviour, a hashed split.
    train2, held2 = split(seeds, 4, seed=3)
    assert len(held2) == 4 and not any(map(learnable, held2))


def _attempt(task_id: str, sample: int, status: VerdictStatus | None) -> Trajectory:
    verdict = None if status is None else Verdict(task_id=task_id, status=status)
    return Trajectory(task_id=task_id, hcp_version="h", route="L2", sample=sample, verdict=verdict,
                      meta={} if status is not None else {"dropped": "turn failed: ReadTimeout"})


def test_rft_attempts_the_tasks_the_adapter_has_not_mastered_first(tmp_path) -> None:
    from mindforge.update.rft import MASTERY, attempt_history, attempted, mastery_rank

    run = RunDir(tmp_path)
    seeds, _ = cycle_tasks(run, 1, "L2")
    learn = [_measured(t, 0.5) for t in seeds[:6]]
    train = learn + seeds[6:12]
    P, F = VerdictStatus.PASS, VerdictStatus.FAIL
    # Cycle 1 attempted tasks 0-3: 0 passed every time, 1 disagreed, 2 never passed, 3 only had dropped turns.
    write_parquet([_attempt(learn[0].id, i, P) for i in range(4)] + [_attempt(learn[1].id, 0, P),
                   _attempt(learn[1].id, 1, F), *(_attempt(learn[2].id, i, F) for i in range(4)),
                   _attempt(learn[3].id, 0, None)], run.stage(1, "update") / "trajectories" / "rft-attempts.parquet")
    # Cycle 2 attempted task 2 again and passed it once: the latest cycle's record is the one that counts.
    write_parquet([_attempt(learn[2].id, 0, P), _attempt(learn[2].id, 1, F)],
                  run.stage(2, "update") / "trajectories" / "rft-attempts.parquet")
    history = attempt_history(run.stage(c, "update") for c in range(4))  # cycles 0 and 3 have none
    assert history == {learn[0].id: (4, 4), learn[1].id: (1, 2), learn[2].id: (1, 2)}
    assert [MASTERY[mastery_rank(history.get(t.id))] for t in learn] == ["mastered", "spread", "spread",
                                                                         "new", "new", "new"]
    order = [t.id for t in attempted(train, 8, cycle=3, history=history)]
    # New ones first (task 3's dropped turns taught nothing), then the spread, mastered last; then the window.
    assert order[:6] == [learn[i].id for i in (3, 4, 5, 1, 2, 0)]
    assert set(order[6:]) <= {t.id for t in seeds[6:12]} and len(order) == 8
    assert [t.id for t in attempted(train, 4, cycle=3, history=history)] == [learn[i].id for i in (3, 4, 5, 1)]
    # No history: the learnable tasks in their split order, as before.
    assert [t.id for t in attempted(train, 8, cycle=3)][:6] == [t.id for t in learn]
