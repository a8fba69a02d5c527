"""The eval stage's bookkeeping with a stand-in solver: statistics, storage, reuse, resume, comparisons.

The solver stands in for the harness, engine and sandbox (tests/test_eval.py
runs them for real); everything around it is the real stage: shards, keys,
the infra-error rule, the paired comparisons and the JSON every command prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mindforge.errors import InputError
from mindforge.eval import EvalConfig, efficacy, run_eval
from mindforge.eval.records import EvalRow
from mindforge.eval.stage import EvalError, EvalServices, subset
from mindforge.eval.stats import mcnemar_exact, paired, pass_at_k
from mindforge.hcp import load_hcp, parse_hcp
from mindforge.paths import default_hcp_path, seed_tasks_dir
from mindforge.store import read_parquet
from mindforge.tasks.benchmarks import SealedSet, builtin, register
from mindforge.tasks.io import load_tasks
from mindforge.tasks.models import Hop, Trajectory, Verdict, VerdictStatus

TASKS = [t for t in load_tasks(seed_tasks_dir()) if t.output_kind == "function"][:6]


class StandInSolver:
    """Passes the tasks in ``passing`` (greedy), routes each to ``route``; counts what it was asked."""

    def __init__(self, passing: set[str], route: str = "L0", infra: set[str] | None = None):
        self.passing, self.route, self.infra = passing, route, set(infra or ())
        self.calls: list[list[str]] = []

    def groups(self, hcp, tasks, samples, seed, **kw):
        self.calls.append([t.id for t in tasks])
        out = []
        for t in tasks:
            group = []
            for s in range(samples):
                if t.id in self.infra:
                    self.infra.discard(t.id)  # fails once, then recovers
                    group.append(Trajectory(task_id=t.id, hcp_version="h", route=self.route, sample=s,
                                            meta={"dropped": "infra_error: daemon gone"}))
                    continue
                status = VerdictStatus.PASS if t.id in self.passing else VerdictStatus.FAIL
                hop = Hop(kind="answer", route=self.route, adapter="a", prompt_ids=(1, 2), completion_ids=(3,),
                          logprobs=(-0.1,), finish_reason="stop", duration_s=0.5)
                group.append(Trajectory(task_id=t.id, hcp_version="h", route=self.route, sample=s, hops=(hop,),
                                        verdict=Verdict(task_id=t.id, status=status, tests=()), reward=float(status == "pass")))
                if kw.get("on_answer"):
                    kw["on_answer"]()
            out.append(group)
        return out


def _services(solver) -> EvalServices:
    return EvalServices(tasks=TASKS, bench_sha="sha", hcp=load_hcp(default_hcp_path()), solver=solver)


def test_pass_at_k_and_mcnemar_match_their_definitions() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 4) == 1.0 and pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - (7 * 6) / (10 * 9))
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # five flips all one way: 2 * 0.5^5
    assert mcnemar_exact(3, 3) == 1.0
    p = paired({"a": 0, "b": 0, "c": 1, "d": 1}, {"a": 1, "b": 1, "c": 1, "d": 0, "e": 1})
    assert (p.n, p.gained, p.lost, p.diff) == (4, 2, 1, 0.25)
    assert p.paired_se == pytest.approx((sum((d - 0.25) ** 2 for d in (1, 1, 0, -1)) / 3 / 4) ** 0.5, abs=1e-6)


def test_the_progress_hook_counts_every_answer_and_stored_shards(tmp_path: Path) -> None:
    config = EvalConfig(run_dir=tmp_path, cycle=0, chunk=4)
    seen: list[tuple[int, int]] = []
    services = _services(StandInSolver(passing=set()))
    services.progress = lambda done, total: seen.append((done, total))
    run_eval(config, services)
    assert seen == [(i, 6) for i in range(1, 7)]
    seen.clear()
    run_eval(config, services)  # every shard stored: the bar jumps shard by shard
    assert seen == [(4, 6), (6, 6)]


def test_each_cycle_is_a_point_on_the_runs_tensorboard_curve(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_eval(EvalConfig(run_dir=tmp_path, cycle=0, chunk=4), _services(StandInSolver(passing={TASKS[0].id})))
    trained = _services(StandInSolver(passing={TASKS[0].id, TASKS[1].id}, route="L2"))
    doc = trained.hcp.to_document()
    doc["router"]["routes"]["L2"]["served_adapter"] = "mf-L2-v0001"  # what cycle 1 left: another eval key
    trained.hcp = parse_hcp(doc, "cycle 1")
    run_eval(EvalConfig(run_dir=tmp_path, cycle=1, chunk=4), trained)
    run_eval(EvalConfig(run_dir=tmp_path, cycle=1, chunk=4, pin_route="L2"),  # a diagnostic: not on the curve
             _services(StandInSolver(passing=set(), route="L2")))
    events = EventAccumulator(str(tmp_path / "tensorboard" / "eval"))
    events.Reload()
    pass1 = [(e.step, round(e.value, 4)) for e in events.Scalars("eval/mbpp/pass@1")]
    assert pass1 == [(0, round(1 / 6, 4)), (1, round(2 / 6, 4))]
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("eval/mbpp/vs_cycle0")] == [(1, round(1 / 6, 4))]
    assert [(e.step, e.value) for e in events.Scalars("eval/mbpp/routing/L2")] == [(0, 0.0), (1, 1.0)]
    # A rerun of the baseline (a new eval of cycle 0) keeps the later cycles on the curve.
    (tmp_path / "cycles" / "0" / "eval" / "DONE.json").unlink()
    run_eval(EvalConfig(run_dir=tmp_path, cycle=0, chunk=4), _services(StandInSolver(passing={TASKS[0].id})))
    events = EventAccumulator(str(tmp_path / "tensorboard" / "eval"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/mbpp/pass@1")] == [0, 1]


def test_an_eval_is_stored_reused_and_never_scored_twice(tmp_path: Path) -> None:
    config = EvalConfig(run_dir=tmp_path, cycle=0, chunk=4)
    solver = StandInSolver(passing={TASKS[0].id, TASKS[1].id})
    first = run_eval(config, _services(solver))
    assert (first.n, first.pass_at_1, first.reused) == (6, pytest.approx(2 / 6, abs=1e-5), False)
    assert first.routing == {"L2": {"L0": 1.0}} and first.by_route["L0"]["n"] == 6
    assert len(solver.calls) == 2  # two shards of at most 4 tasks
    again = run_eval(config, _services(solver))
    assert again.reused and len(solver.calls) == 2 and again.key == first.key
    summary = again.summary()
    assert {"bench", "n", "pass@1", "se", "routing"} <= set(summary) and "vs_previous" not in summary
    json.dumps(summary)


def test_a_killed_eval_resumes_at_the_shards_it_is_missing(tmp_path: Path) -> None:
    config = EvalConfig(run_dir=tmp_path, cycle=0, chunk=2)

    class Killed(StandInSolver):
        def groups(self, hcp, tasks, samples, seed, **kw):
            if len(self.calls) == 2:
                raise KeyboardInterrupt
            return super().groups(hcp, tasks, samples, seed, **kw)

    killed = Killed(passing=set())
    with pytest.raises(KeyboardInterrupt):
        run_eval(config, _services(killed))
    stored = {tuple(r.task_id for r in read_parquet(f, EvalRow)) for f in tmp_path.glob("evals/*/*/greedy-*.parquet")}
    assert stored and stored <= {tuple(c) for c in killed.calls}  # what was stored came whole from a shard
    rest = StandInSolver(passing=set())
    result = run_eval(config, _services(rest))
    shards = {tuple(t.id for t in subset(TASKS, None)[i:i + 2]) for i in (0, 2, 4)}
    assert {tuple(c) for c in rest.calls} == shards - stored  # only what the kill left unscored, once each
    assert len(rest.calls) == 3 - len(stored)
    assert result.n == 6 and not result.reused


def test_infra_errors_are_run_again_and_never_scored(tmp_path: Path) -> None:
    flaky = StandInSolver(passing={TASKS[2].id}, infra={TASKS[2].id})
    logged: list[str] = []
    services = _services(flaky)
    services.log = logged.append
    result = run_eval(EvalConfig(run_dir=tmp_path, cycle=0), services)
    assert "1 task(s) hit an infrastructure error (infra_error: daemon gone); running them once more" in logged
    assert result.pass_at_1 == pytest.approx(1 / 6, abs=1e-5) and result.n == 6
    assert flaky.calls[-1] == [TASKS[2].id]

    class Broken(StandInSolver):
        def groups(self, hcp, tasks, samples, seed, **kw):
            self.infra = {t.id for t in tasks}
            return super().groups(hcp, tasks, samples, seed, **kw)

    with pytest.raises(EvalError, match=r"infrastructure error \(infra_error: daemon gone\)"):
        run_eval(EvalConfig(run_dir=tmp_path / "b", cycle=0), _services(Broken(passing=set())))


def test_each_cycle_is_paired_with_the_previous_one_and_with_cycle_0(tmp_path: Path) -> None:
    ids = [t.id for t in TASKS]
    run_eval(EvalConfig(run_dir=tmp_path, cycle=0), _services(StandInSolver(passing=set(ids[:1]))))
    doc = load_hcp(default_hcp_path()).to_document()
    doc["router"]["routes"]["L2"]["served_adapter"] = "mf-L2-v0001"  # what an Update would leave in force
    hcp2 = parse_hcp(doc, "cycle 1")
    one = run_eval(EvalConfig(run_dir=tmp_path, cycle=1),
                   EvalServices(tasks=TASKS, bench_sha="sha", hcp=hcp2, solver=StandInSolver(set(ids[:3]), "L2")))
    assert one.vs_previous.gained == 2 and one.vs_previous.lost == 0 and one.previous_cycle == 0
    assert one.vs_cycle0 == one.vs_previous and one.routing == {"L2": {"L2": 1.0}}
    two = run_eval(EvalConfig(run_dir=tmp_path, cycle=2),
                   EvalServices(tasks=TASKS, bench_sha="sha2", hcp=hcp2, solver=StandInSolver(set(ids[1:4]))))
    assert (two.vs_previous.gained, two.vs_previous.lost, two.previous_cycle) == (1, 1, 1)
    assert (two.vs_cycle0.gained, two.vs_cycle0.lost, two.vs_cycle0.diff) == (3, 1, pytest.approx(2 / 6, abs=1e-5))
    s = two.summary()
    assert set(s["vs_previous"]) >= {"diff", "paired_se", "mcnemar_p"} and set(s["vs_cycle0"]) >= {"diff"}
    assert [r.cycle for r in efficacy(tmp_path)] == [0, 1, 2]


def test_a_bfloat16_engines_eval_has_its_own_key_and_is_paired_only_with_bfloat16_evals(tmp_path: Path) -> None:
    ids = [t.id for t in TASKS]
    fp32 = run_eval(EvalConfig(run_dir=tmp_path, cycle=0), _services(StandInSolver(passing=set(ids[:1]))))
    bf16_services = _services(StandInSolver(passing=set(ids[:2])))
    bf16_services.engine_dtype = "bfloat16"
    bf16 = run_eval(EvalConfig(run_dir=tmp_path, cycle=0), bf16_services)
    assert bf16.key != fp32.key and not bf16.reused and bf16.summary()["engine_dtype"] == "bfloat16"
    assert "engine_dtype" not in fp32.summary() and fp32.engine_dtype == "float32"
    later = _services(StandInSolver(passing=set(ids[:3])))  # a float32 cycle 1 after the bf16 cycle 0
    one = run_eval(EvalConfig(run_dir=tmp_path, cycle=1), later)
    assert one.vs_cycle0 is None and one.vs_previous is None  # no float32 eval to pair with is left
    later_bf16 = _services(StandInSolver(passing=set(ids[:3])))
    later_bf16.engine_dtype = "bfloat16"
    two = run_eval(EvalConfig(run_dir=tmp_path, cycle=2), later_bf16)
    # The same configuration as cycle 0's bf16 eval: its rows are reused, and it is paired with that eval
    # (cycle 0), not with cycle 1's float32 one.
    assert two.reused and two.key == bf16.key and two.previous_cycle == 0 and two.vs_cycle0.n == len(TASKS)


def test_a_diagnostic_eval_is_stored_beside_the_cycles_eval_never_as_it(tmp_path: Path) -> None:
    ids = [t.id for t in TASKS]
    cycle0 = run_eval(EvalConfig(run_dir=tmp_path, cycle=0), _services(StandInSolver(passing=set(ids[:1]))))
    doc = load_hcp(default_hcp_path()).to_document()
    doc["router"]["routes"]["L2"]["served_adapter"] = "mf-L2-v0001"
    trained = tmp_path / "trained.hcp.json"
    trained.write_text(json.dumps(doc))
    for diagnostic in ({"pin_route": "L2"}, {"hcp": trained}, {"adapters_from": trained}):
        config = EvalConfig(run_dir=tmp_path, cycle=1, **diagnostic)
        assert config.diagnostic
        # The runtime serves the override (eval.runtime); here the stand-in services carry what it would.
        hcp = load_hcp(default_hcp_path()) if "pin_route" in diagnostic else parse_hcp(doc, "trained")
        got = run_eval(config, EvalServices(tasks=TASKS, bench_sha="sha", hcp=hcp,
                                            solver=StandInSolver(passing=set(ids[:2]))))
        assert got.key != cycle0.key and got.vs_cycle0.gained == 1
    assert not (tmp_path / "cycles" / "1" / "eval").exists() or not any((tmp_path / "cycles" / "1" / "eval").iterdir())
    assert [r.cycle for r in efficacy(tmp_path)] == [0]


def test_the_same_configuration_in_a_later_cycle_reuses_the_stored_rows(tmp_path: Path) -> None:
    solver = StandInSolver(passing={TASKS[0].id})
    run_eval(EvalConfig(run_dir=tmp_path, cycle=0), _services(solver))
    later = run_eval(EvalConfig(run_dir=tmp_path, cycle=1), _services(solver))  # nothing changed in cycle 1
    assert later.reused and len(solver.calls) == 1 and later.vs_cycle0.diff == 0


def test_a_fixed_subset_is_the_same_every_cycle_and_says_so(tmp_path: Path) -> None:
    a = run_eval(EvalConfig(run_dir=tmp_path, cycle=0, max_tasks=4), _services(StandInSolver(set())))
    b = run_eval(EvalConfig(run_dir=tmp_path, cycle=1, max_tasks=4), _services(StandInSolver(set())))
    assert a.n == b.n == 4 and b.vs_cycle0.n == 4 and "4 of 6 tasks" in b.summary()["subset"]


def test_sealed_benchmarks_stop_a_stage_that_would_select_or_train_on_them(tmp_path: Path) -> None:
    mbpp = builtin()["mbpp"]
    if not mbpp.path.is_file():
        pytest.skip(f"the sealed MBPP data is not beside this checkout ({mbpp.path})")
    sealed = SealedSet([mbpp])
    bench_task = mbpp.tasks()[7]
    assert sealed.hits(TASKS) == []
    with pytest.raises(InputError, match="sealed benchmark"):
        sealed.refuse([*TASKS, bench_task], "Update's tasks")
    # A user benchmark registered by path is sealed too.
    mine = tmp_path / "mine.jsonl"
    mine.write_text(TASKS[0].model_dump_json() + "\n")
    register(tmp_path / "cache", "mine", mine)
    with pytest.raises(InputError, match="benchmark mine"):
        SealedSet.of(tmp_path / "cache").refuse(TASKS, "Expansion's tasks")


def test_a_bad_benchmark_file_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(TASKS[0].model_dump_json() + "\n{\"family\": \"L2\"}\n")
    with pytest.raises(InputError) as err:
        register(tmp_path / "cache", "bad", bad)
    assert str(bad) in str(err.value) and "2" in str(err.value)


def test_a_benchmark_task_in_a_cycles_discovery_output_stops_expansion_and_update(tmp_path: Path) -> None:
    """Whatever reaches the cycle's task folder, Expansion's splits and Update's training refuse a sealed task."""
    from mindforge.expansion.config import ExpansionConfig
    from mindforge.expansion.stage import ExpansionServices, run_expansion
    from mindforge.store import RunDir, write_parquet
    from mindforge.update.stage import UpdateConfig, UpdateServices, run_update

    mbpp = builtin()["mbpp"]
    if not mbpp.path.is_file():
        pytest.skip(f"the sealed MBPP data is not beside this checkout ({mbpp.path})")
    leaked = mbpp.tasks()[3]
    write_parquet([*TASKS[:4], leaked], RunDir(tmp_path).stage(1, "discovery") / "tasks" / "accepted.parquet")
    sealed = SealedSet([mbpp])
    with pytest.raises(InputError, match=f"{leaked.id} \\(benchmark mbpp\\)"):
        run_expansion(ExpansionConfig(run_dir=tmp_path, cycle=1), ExpansionServices(solver=None, sealed=sealed))
    nothing = dict.fromkeys(("engine", "verifier", "runner_for", "open_session", "catalog", "load_policy",
                             "make_trainer", "render_probe", "base_model"))
    services = UpdateServices(**nothing, hcp_doc=load_hcp(default_hcp_path()).to_document(), sealed=sealed)
    with pytest.raises(InputError, match="benchmarks are evaluated, never trained or selected on"):
        run_update(UpdateConfig(run_dir=tmp_path, cycle=1, route="L2"), services)
    # Nothing was trained or selected: no split, no trajectory, no catalog entry.
    assert not (tmp_path / "cycles/1/expansion/inputs.json").exists() and not (tmp_path / "adapters").exists()
