"""Expansion logic with a stand-in solver (no engine, no sandbox): splits, policy, audit,
acceptance, proposers, stop rules, journal resume. The real harness + engine + sandbox run
in tests/test_expansion_integration.py."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from mindforge.expansion import (
    AuditReport,
    ExpansionConfig,
    ExpansionServices,
    NumericProposer,
    PairedGainRule,
    PatchPolicy,
    ProposalContext,
    Refusal,
    ScriptedProposer,
    StructuralProposer,
    TaskScores,
    TrainView,
    audit,
    classify,
    compare,
    parse_reflection,
    run_expansion,
    split_tasks,
)
from mindforge.expansion.journal import Journal
from mindforge.hcp import HCP, hcp_hash, load_hcp
from mindforge.paths import default_hcp_path, seed_tasks_dir
from mindforge.tasks import Hop, Task, Trajectory, Verdict
from mindforge.tasks import TestOutcome as Outcome
from mindforge.tasks import TestResult as TResult
from mindforge.tasks.io import load_tasks

DEFAULT = default_hcp_path()
ANSWER = "/provider/sampling/answer"


def seed_tasks(family: str | None = None) -> list[Task]:
    tasks = load_tasks(seed_tasks_dir())
    return [t for t in tasks if family is None or t.family == family]


class FakeSolver:
    """Reward depends on the HCP like a real model would: a task needs a token budget
    (by its id) and high temperatures add seed-driven failures. Counts every solve."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def solve(self, hcp: HCP, tasks, samples, seed):
        s = hcp.sampling("answer")
        out = []
        self.calls.append((hcp_hash(hcp), len(tasks), seed))
        for t in tasks:
            need = 32 + int(t.id[2:6], 16) % 64
            for k in range(samples):
                rng = random.Random(f"{seed}|{t.id}|{k}")
                ok = s.max_tokens >= need and rng.random() >= s.temperature / 2
                verdict = Verdict(task_id=t.id, status="pass" if ok else "fail",
                                  tests=(TResult(name="c", outcome="pass" if ok else "fail", message="x"),))
                hop = Hop(kind="answer", route=t.family, adapter="a", prompt_ids=(1,), completion_ids=(2,) * 3,
                          logprobs=(0.0,) * 3, finish_reason="stop" if ok else "length")
                out.append(Trajectory(task_id=t.id, hcp_version=hcp_hash(hcp), route=t.family, sample=k,
                                      seed=seed, hops=(hop,), answer="ans", verdict=verdict,
                                      reward=1.0 if ok else 0.0))
        return out


def start_doc(max_tokens: int = 16, temperature: float = 0.0) -> dict:
    doc = copy.deepcopy(load_hcp(DEFAULT).to_document())
    doc["provider"]["sampling"]["answer"].update(max_tokens=max_tokens, temperature=temperature)
    for t in doc["tunable"]:
        if t["path"] == f"{ANSWER}/max_tokens":
            t["min"] = 8
    return doc


def write_start(tmp_path: Path, **kw) -> Path:
    p = tmp_path / "start.hcp.json"
    p.write_text(json.dumps(start_doc(**kw)))
    return p


def config(tmp_path: Path, **kw) -> ExpansionConfig:
    base = {"run_dir": tmp_path / "run", "cycle": 1, "start_hcp": write_start(tmp_path), "families": ("L2",),
                "max_tasks": 24, "minibatch": 4, "budget": 6, "patience": 3, "proposers": ("numeric", "structural")}
    base.update(kw)
    return ExpansionConfig(**base)


BETTER = ([{"op": "replace", "path": f"{ANSWER}/max_tokens", "value": 256}], "answers need more tokens")
WORSE = ([{"op": "replace", "path": f"{ANSWER}/max_tokens", "value": 8}], "shorter answers")
NOISE = ([{"op": "replace", "path": "/skills/1/description", "value": "Writing HTML."}], "reword an L3 skill")
GUARDED = ([{"op": "replace", "path": "/guarded/verifier/reruns", "value": 0}], "grade faster")
BROKEN = ([{"op": "replace", "path": f"{ANSWER}/temperature", "value": 7.5}], "very creative")


# ---------------------------------------------------------------- splits
def test_splits_are_deterministic_disjoint_and_non_empty():
    tasks = seed_tasks()
    a = split_tasks(tasks, 0.34, 0.33)
    b = split_tasks(list(reversed(tasks)), 0.34, 0.33)
    assert a.ids() == b.ids()
    ids = [set(v) for v in a.ids().values()]
    assert all(ids) and not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])
    assert sum(map(len, ids)) == len(tasks)
    # a task keeps its split when the pool grows
    small = split_tasks(tasks[:40], 0.34, 0.33)
    for name, got in small.ids().items():
        assert set(got) - set(a.ids()[name]) == set() or len(tasks[:40]) < 10
    tiny = split_tasks(tasks[:3], 0.34, 0.33)
    assert all(len(v) == 1 for v in tiny.ids().values())


# ---------------------------------------------------------------- policy
@pytest.mark.parametrize("ops,kind", [
    ([{"op": "replace", "path": "/guarded/sandbox/cpus", "value": 8}], "guarded"),
    ([{"op": "move", "from": "/guarded/verifier", "path": "/agents_md"}], "guarded"),
    ([{"op": "replace", "path": "/tunable/0/max", "value": 2.0}], "forbidden"),
    ([{"op": "replace", "path": "/provider/base_url", "value": "http://evil:1"}], "forbidden"),
    ([{"op": "replace", "path": "/router/routes/L2/served_adapter", "value": "x-v9"}], "forbidden"),
    ([{"op": "replace", "path": "/router", "value": {}}], "rewrite"),
    ([{"op": "remove", "path": "/skills"}], "rewrite"),
    ([{"op": "replace", "path": f"{ANSWER}/temperature", "value": 9}], "invalid"),
    ([{"op": "replace", "path": "/nope", "value": 1}], "invalid"),
    ({"op": "replace"}, "malformed"),
    ([], "malformed"),
    ([{"op": "replace", "path": f"{ANSWER}/temperature", "value": 0.2}], "duplicate"),  # a no-op
])
def test_policy_refuses_before_evaluation(ops, kind):
    got = PatchPolicy().check(load_hcp(DEFAULT).to_document(), ops)
    assert isinstance(got, Refusal) and got.kind == kind, got


def test_policy_admits_small_edits_and_remembers_tries():
    doc = load_hcp(DEFAULT).to_document()
    policy = PatchPolicy()
    ops = [{"op": "replace", "path": "/system/L2", "value": "Reply with one ```python block only."}]
    got = policy.check(doc, ops)
    assert not isinstance(got, Refusal) and got.hcp_hash != hcp_hash(doc)
    assert got.document["system"]["L2"].startswith("Reply")
    policy.remember(got.hcp_hash, ops)
    assert policy.check(doc, ops).kind == "duplicate"
    # same document reached by another patch: duplicate by hash
    alt = [{"op": "add", "path": "/system/L2", "value": "Reply with one ```python block only."}]
    assert policy.check(doc, alt).kind == "duplicate"
    # a value within 2% of the declared range of a tried one: near-duplicate
    t = [{"op": "replace", "path": f"{ANSWER}/temperature", "value": 0.5}]
    policy.remember(policy.check(doc, t).hcp_hash, t)
    near = policy.check(doc, [{"op": "replace", "path": f"{ANSWER}/temperature", "value": 0.51}])
    assert near.kind == "near_duplicate"
    far = policy.check(doc, [{"op": "replace", "path": f"{ANSWER}/temperature", "value": 0.9}])
    assert not isinstance(far, Refusal)
    # editing inside a top-level string field is an edit, not a rewrite
    assert not isinstance(policy.check(doc, [{"op": "replace", "path": "/agents_md", "value": "Be exact."}]), Refusal)


# ---------------------------------------------------------------- audit
def _traj(task: Task, route: str, answer: str, verdict: Verdict | None, reward, finish="stop", **kw):
    hop = Hop(kind="answer", route=route, adapter="a", prompt_ids=(1,), completion_ids=(2, 3),
              logprobs=(0.0, 0.0), finish_reason=finish)
    return Trajectory(task_id=task.id, hcp_version="h-x", route=route, hops=(hop,), answer=answer,
                      verdict=verdict, reward=reward, **kw)


def test_audit_classes_and_evidence():
    l2 = seed_tasks("L2")[0]
    l1 = seed_tasks("L1")[0]

    def v(task, status, outcome="fail", msg="AssertionError"):
        return Verdict(task_id=task.id, status=status, tests=(TResult(name="t1", outcome=outcome, message=msg),))

    cases = [
        (l2, _traj(l2, "L2", "x", Verdict(task_id=l2.id, status="infra_error", log="docker down"), None), "infra_error"),
        (l2, _traj(l2, "L0", "def f(): pass", v(l2, "fail"), 0.0), "wrong_route"),
        (l2, _traj(l2, "L2", "  ", v(l2, "fail"), 0.0, finish="length"), "empty_answer"),
        (l1, _traj(l1, "L1", "done", v(l1, "fail"), 0.0), "tool_misuse"),
        (l2, _traj(l2, "L2", "def f(:", v(l2, "fail", "error", "candidate failed to load: SyntaxError"), 0.0),
         "format_error"),
        (l2, _traj(l2, "L2", "code", v(l2, "fail"), 0.0, meta={"format_problem": "no ```python block"}),
         "format_error"),
        (l2, _traj(l2, "L2", "code", v(l2, "fail", Outcome.TIMEOUT, ""), 0.0), "timeout"),
        (l2, _traj(l2, "L2", "code", v(l2, "fail", "fail", "assert 1 == 2"), 0.0, finish="length"),
         "wrong_answer"),
    ]
    for task, tr, want in cases:
        got = classify(task, tr)
        assert got is not None and got[0] == want, (want, got)
    assert "cut at max_tokens" in classify(l2, cases[-1][1])[1]
    assert "routed to L0" in classify(l2, cases[1][1])[1]
    passed = _traj(l2, "L2", "ok", v(l2, "pass", "pass", ""), 1.0)
    assert classify(l2, passed) is None
    report = audit([l1, l2], [tr for _, tr, _ in cases] + [passed], "h-x")
    assert report.passed == 1 and report.failed == len(cases)
    assert report.counts["L2"]["format_error"] == 2 and report.counts["L1"]["tool_misuse"] == 1
    assert {"route": "L1", "class": "tool_misuse", "failures": 1} in report.rows()


# ---------------------------------------------------------------- reflection parsing
@pytest.mark.parametrize("text", [
    "Sure! I think the assistant should be better.",
    '{"reason": "x", "patch": "replace"}',
    '{"patch": [{"op": "replace", "path": "/system/L2", "value": "x"}]}',
    '{"reason": "x", "patch": [{"op": "replace", "path": "/sys',
    "[1, 2, 3]",
])
def test_junk_reflections_are_malformed_not_crashes(text):
    ops, _, why = parse_reflection(text)
    assert ops is None and why


def test_reflection_in_a_fence_parses():
    text = 'Here:\n```json\n{"reason": "answers are cut", "patch": [{"op": "replace", "path": "/limits/max_tool_turns", "value": 3}]}\n```'
    ops, hyp, why = parse_reflection(text)
    assert why is None and hyp == "answers are cut" and ops[0]["value"] == 3


# ---------------------------------------------------------------- acceptance
def _scores(values: dict[str, float], routes: dict[str, str]) -> TaskScores:
    return TaskScores(hcp_version="h", scores=values, routes=routes)


def test_paired_gain_rule_numbers():
    routes = {f"t{i}": ("L0" if i < 4 else "L2") for i in range(8)}
    inc = _scores({f"t{i}": 0.0 for i in range(8)}, routes)
    better = _scores({f"t{i}": 1.0 for i in range(8)}, routes)
    rule = PairedGainRule(min_delta=0.05, k_se=2.0, route_tolerance=0.1)
    d = rule.decide(compare(better, inc), noise_floor=0.0)
    assert d.accepted and d.gain == 1.0 and d.se == 0.0 and d.threshold == 0.05
    noisy = _scores({f"t{i}": float(i % 2) for i in range(8)}, routes)
    shifted = _scores({f"t{i}": float((i // 2) % 2) for i in range(8)}, routes)
    d = rule.decide(compare(noisy, shifted), noise_floor=0.0)
    assert not d.accepted and d.threshold == pytest.approx(2 * d.se) and "threshold" in d.reason
    # a real gain below the noise floor is not a gain
    assert not rule.decide(compare(better, inc), noise_floor=1.0).accepted
    # a gain on L0 bought with a loss on L2 is refused
    mixed = _scores({f"t{i}": (1.0 if i < 4 else 0.0) for i in range(8)}, routes)
    inc2 = _scores({f"t{i}": (0.0 if i < 4 else 0.5) for i in range(8)}, routes)
    d = rule.decide(compare(mixed, inc2), noise_floor=0.0)
    assert not d.accepted and "L2" in d.regressions
    # clearly worse on the minibatch: dropped before the full validation
    assert rule.survives_minibatch(compare(inc, better), 0.0) is not None
    assert rule.survives_minibatch(compare(noisy, shifted), 0.0) is None


# ---------------------------------------------------------------- operators
def test_numeric_proposer_follows_the_audit_and_stays_in_range():
    hcp = HCP.from_document(start_doc(max_tokens=16))
    l2 = seed_tasks("L2")[:3]
    trajs = FakeSolver().solve(hcp, l2, 1, 0)
    view = TrainView(tasks=l2, trajectories=trajs, audit=audit(l2, trajs, hcp_hash(hcp)))
    policy = PatchPolicy()
    ctx = ProposalContext(index=0, seed=0, incumbent=hcp, train=lambda: view,
                          refused=lambda ops: isinstance(policy.check(hcp.to_document(), list(ops)), Refusal))
    first = NumericProposer().propose(ctx)
    assert first.ops[0]["path"] == f"{ANSWER}/max_tokens" and first.ops[0]["value"] > 16
    assert "cut at max_tokens" in first.hypothesis
    for _, _, ops, _ in NumericProposer().moves(ctx):
        t = next(r for r in hcp.tunable if r.path == ops[0]["path"])
        assert t.min <= ops[0]["value"] <= t.max
    toggle = StructuralProposer().propose(ctx)
    assert toggle.ops[0]["path"].endswith("/enabled")


# ---------------------------------------------------------------- the stage
def _run(cfg, proposer, solver=None, progress=None):
    solver = solver or FakeSolver()
    result = run_expansion(cfg, ExpansionServices(solver=solver, proposers=[proposer], progress=progress))
    return result, solver, Journal(Path(cfg.run_dir) / "cycles/1/expansion/journal.jsonl").candidates()


def test_scripted_better_accepted_worse_and_noise_rejected(tmp_path):
    cfg = config(tmp_path, budget=3, patience=5)
    seen = []
    result, _solver, recs = _run(cfg, ScriptedProposer([BETTER, WORSE, NOISE]),
                                 progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]  # the progress bar: candidates evaluated of the budget
    assert [r.outcome for r in recs] == ["accepted", "rejected", "rejected"]
    assert recs[1].parent == recs[0].hcp_hash  # the worse patch applies to the new incumbent
    assert recs[1].stage == "minibatch"  # clearly worse: dropped early
    assert recs[2].gain == 0.0 and "threshold" in recs[2].reason
    assert result.best_hcp == recs[0].hcp_hash and result.accepted == 1 and result.candidates == 3
    assert result.test.best.mean > result.test.start.mean
    assert result.stop_kind == "budget"
    assert "max_tokens" in result.diff_markdown and "```diff" in result.diff_markdown
    folder = Path(cfg.run_dir) / "cycles/1/expansion"
    assert (folder / "hcp" / f"{result.best_hcp}.hcp.json").is_file()
    assert load_hcp(folder / "hcp" / f"{result.best_hcp}.hcp.json").sampling("answer").max_tokens == 256
    for name in ("lineage.json", "lineage.parquet", "audit.json", "diff.md", "DONE.json"):
        assert (folder / name).is_file(), name
    assert {"hash", "parent", "hypothesis", "validation", "decision"} <= set(result.candidate_rows[0])
    assert {"task", "route", "reward", "verdict", "tokens"} <= set(result.trajectory_rows[0])
    summary = result.summary()
    assert set(summary) == {"start_hcp", "best_hcp", "stop_reason", "candidates", "accepted", "test"}
    json.dumps(summary)
    # finished: a rerun returns the stored result and solves nothing
    again, solver2, _ = _run(cfg, ScriptedProposer([]))
    assert again == result and solver2.calls == []


def test_guarded_and_schema_breaking_refused_with_zero_evaluations(tmp_path):
    cfg = config(tmp_path, budget=2, max_duplicates=5)
    solver = FakeSolver()
    result, _, recs = _run(cfg, ScriptedProposer([GUARDED, BROKEN]), solver)
    assert [(r.outcome, r.refusal) for r in recs] == [("refused", "guarded"), ("refused", "invalid")]
    assert all(r.rollouts == 0 and r.hcp_hash is None for r in recs)
    candidate_solves = [c for c in solver.calls if c[0] != result.start_hcp]
    assert candidate_solves == []  # only the start was ever solved
    assert result.stop_kind == "exhausted" and result.candidates == 0


def test_patience_ends_the_loop_with_that_reason(tmp_path):
    cfg = config(tmp_path, patience=2, budget=10)
    noise2 = ([{"op": "replace", "path": "/skills/1/body", "value": "Write HTML."}], "reword L3 skill body")
    result, _, recs = _run(cfg, ScriptedProposer([NOISE, noise2, BETTER]))
    assert [r.outcome for r in recs] == ["rejected", "rejected"]
    assert result.stop_kind == "patience" and "patience" in result.stop_reason


def test_duplicates_in_a_row_stop(tmp_path):
    cfg = config(tmp_path, max_duplicates=2, budget=10, patience=10)
    result, _, recs = _run(cfg, ScriptedProposer([NOISE, NOISE, NOISE, BETTER]))
    assert [r.outcome for r in recs] == ["rejected", "refused", "refused"]
    assert result.stop_kind == "duplicates"


def test_operators_reach_a_stop_on_their_own(tmp_path):
    cfg = config(tmp_path, budget=5, proposers=("numeric", "structural"))
    result = run_expansion(cfg, ExpansionServices(solver=FakeSolver()))
    assert result.stop_kind in ("budget", "patience", "exhausted")
    assert result.candidates <= 5
    assert result.test.best.mean >= result.test.start.mean


class Killed(Exception):
    pass


class DyingSolver(FakeSolver):
    def __init__(self, die_after: int):
        super().__init__()
        self.die_after = die_after

    def solve(self, hcp, tasks, samples, seed):
        if len(self.calls) >= self.die_after:
            raise Killed()
        return super().solve(hcp, tasks, samples, seed)


def test_resume_after_a_crash_never_decides_a_candidate_twice(tmp_path):
    cfg = config(tmp_path, budget=4, patience=10, proposers=("numeric",))
    with pytest.raises(Killed):
        run_expansion(cfg, ExpansionServices(solver=DyingSolver(die_after=7)))
    journal = Path(cfg.run_dir) / "cycles/1/expansion/journal.jsonl"
    before = Journal(journal).candidates()
    assert before, "the crash came after some candidates were decided"
    solver = FakeSolver()
    result = run_expansion(cfg, ExpansionServices(solver=solver))
    after = Journal(journal).candidates()
    assert after[: len(before)] == before
    hashes = [r.hcp_hash for r in after if r.outcome != "refused"]
    assert len(hashes) == len(set(hashes))
    assert [r.index for r in after] == list(range(len(after)))
    assert result.candidates == len(hashes) <= 4
    # the resumed run did not solve the already decided candidates again
    assert not {c[0] for c in solver.calls} & {r.hcp_hash for r in before}


def test_a_changed_input_is_refused_not_mixed(tmp_path):
    cfg = config(tmp_path, budget=1)
    with pytest.raises(Killed):
        run_expansion(cfg, ExpansionServices(solver=DyingSolver(die_after=1)))
    other = cfg.model_copy(update={"seed": 5})
    from mindforge.errors import InputError

    with pytest.raises(InputError, match="other inputs"):
        run_expansion(other, ExpansionServices(solver=FakeSolver()))


def test_audit_report_is_serialisable():
    assert AuditReport(hcp_version="h", items=(), counts={}, passed=0, failed=0).rows() == []


# ---------------------------------------------------------------- reflection in the loop
class JunkThenGoodReflector:
    """Stands in for the 135M model: mostly junk, once a valid patch."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def reflect(self, hcp, prompt, seed):
        self.prompts.append(prompt)
        if len(self.prompts) == 2:
            return json.dumps({"reason": "answers are cut short", "patch": BETTER[0]})
        return "I think the assistant should try harder and be more helpful."


def test_reflection_sees_only_train_and_junk_is_recorded_not_evaluated(tmp_path):
    from mindforge.expansion import ReflectiveProposer

    cfg = config(tmp_path, budget=1, patience=5, max_duplicates=5)
    reflector = JunkThenGoodReflector()
    solver = FakeSolver()
    result, _, recs = _run(cfg, ReflectiveProposer(reflector, examples=3), solver)
    assert [(r.outcome, r.refusal) for r in recs] == [("refused", "malformed"), ("accepted", None)]
    assert "raw reply" in recs[0].reason and recs[0].rollouts == 0
    assert recs[1].hypothesis == "answers are cut short"
    splits = json.loads((Path(cfg.run_dir) / "cycles/1/expansion/inputs.json").read_text())["splits"]
    held_out = set(splits["validation"]) | set(splits["test"])
    tasks = {t.id: t for t in seed_tasks("L2")}
    for prompt in reflector.prompts:
        assert "Failures:" in prompt
        assert not any(tasks[i].prompt[:60].replace("\n", " ") in prompt for i in held_out)
    assert result.stop_kind == "budget"


def test_harness_solver_scores_with_the_real_sandbox():
    """The production solver's sandbox side, with a stand-in harness turn."""
    from helpers import require

    from mindforge.expansion.solve import AuditedSolver
    from mindforge.rollouts import HarnessSolver, TurnOutcome
    from mindforge.sandbox import SandboxConfig, SandboxPool

    try:
        import docker

        docker.from_env().ping()
        ok = True
    except Exception:  # noqa: BLE001 - any failure means no engine
        ok = False
    require(ok, "Docker engine not reachable")
    tasks = seed_tasks("L2")[:2] + seed_tasks("L0")[:1]

    async def turn(task, seed, tools):
        if task.output_kind == "text":
            return TurnOutcome(answer=task.reference, hops=[], route="L0")
        if task is tasks[0]:
            return TurnOutcome(answer=f"Here you go:\n```python\n{task.reference}\n```", hops=[], route="L2")
        return TurnOutcome(answer="def nothing():\n    return 1", hops=[], route="L2")  # no fence, wrong name

    with SandboxPool(SandboxConfig(pool_size=2)) as pool:
        got = AuditedSolver(HarnessSolver(lambda hcp: turn, pool)).solve(load_hcp(DEFAULT), tasks, 1, 0)
    by_task = {t.task_id: t for t in got}
    assert by_task[tasks[0].id].reward == 1.0 and by_task[tasks[2].id].reward == 1.0
    bad = by_task[tasks[1].id]
    assert bad.reward == 0.0 and "no ```python code block" in bad.meta["format_problem"]
    assert classify(tasks[1], bad)[0] == "format_error"


def test_too_few_discovered_tasks_are_joined_by_seed_tasks(tmp_path):
    from mindforge.expansion.inputs import cycle_tasks
    from mindforge.store import RunDir, write_parquet

    seeds = load_tasks(seed_tasks_dir())
    found = [t.model_copy(update={"prompt": t.prompt + " (discovered)"}) for t in seeds[:2]]
    found = [Task.model_validate(t.model_dump(exclude={"id"})) for t in found]
    write_parquet(found, RunDir(tmp_path).stage(1, "discovery") / "tasks" / "accepted.parquet")
    chosen, source = cycle_tasks(ExpansionConfig(run_dir=tmp_path, cycle=1, max_tasks=6))
    assert len(chosen) == 6 and {t.id for t in found} <= {t.id for t in chosen}
    assert "(2 tasks) and the seed tasks" in source
    with pytest.raises(Exception, match="at least 3"):
        cycle_tasks(ExpansionConfig(run_dir=tmp_path, cycle=1, max_tasks=6, use_seed_tasks=False))
