"""Discovery's pure parts: Wilson interval, sequential sampling, checks, novelty, proposers, journal."""

from __future__ import annotations

import ast
import collections
import json
from pathlib import Path

import pytest

from mindforge.discovery import archive
from mindforge.discovery.checks import Rejection, check, parse_candidate, sources_used
from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.difficulty import measure, wilson
from mindforge.discovery.journal import Journal
from mindforge.discovery.novelty import NoveltyIndex, structure_hash
from mindforge.discovery.proposers import model as model_proposer
from mindforge.discovery.proposers import procedural
from mindforge.discovery.proposers.base import Proposal
from mindforge.discovery.stage import (
    DiscoveryServices,
    arm_record,
    draw_arm,
    earlier_journals,
    kind_record,
    open_journal,
    plan,
    round_ends,
    screen,
)
from mindforge.tasks.decisions import Decision
from mindforge.tasks.models import Task


def cfg(tmp_path: Path, **kw) -> DiscoveryConfig:
    return DiscoveryConfig(run_dir=tmp_path, cycle=1, mbpp_dir=None, **kw)


def fn_task(ep="add_one", body="return x + 1", tests=("assert add_one(1) == 2",), prompt=None) -> Task:
    return Task(family="L2", prompt=prompt or f"Write a Python function `{ep}(x)` that adds one.",
                output_kind="function", entry_point=ep, reference=f"def {ep}(x):\n    {body}\n",
                tests=[{"name": f"t{i}", "code": c} for i, c in enumerate(tests)])


def test_wilson_matches_known_values() -> None:
    lo, hi = wilson(5, 10, 0.95)
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    assert wilson(0, 10, 0.95)[0] == pytest.approx(0.0, abs=1e-12) and wilson(0, 10, 0.95)[1] == pytest.approx(0.2775, abs=1e-3)


def _scripted(results):
    calls = []

    def attempt(first, n):
        calls.append((first, n))
        return results[first:first + n]

    return attempt, calls


def test_all_failures_stop_early_as_too_hard() -> None:
    attempt, calls = _scripted([False] * 50)
    d = measure(attempt, (0.1, 0.9), 0.9, 4, 12)
    assert d.decision == "too_hard" and d.attempts == 4 and calls == [(0, 4)]


def test_all_passes_stop_early_as_too_easy() -> None:
    attempt, _ = _scripted([True] * 50)
    assert measure(attempt, (0.1, 0.9), 0.9, 4, 12).decision == "too_easy"


def test_mixed_results_sample_until_the_interval_is_inside_the_band() -> None:
    attempt, calls = _scripted([True, False] * 20)
    d = measure(attempt, (0.1, 0.9), 0.9, 4, 16)
    assert d.decision == "in_band" and 0.1 <= d.low and d.high <= 0.9 and d.rate == 0.5 and d.learnability == 0.25
    attempt, calls = _scripted([True, False, False, False] * 10)  # 1/4 at n=4: the interval reaches below 0.1
    d = measure(attempt, (0.1, 0.9), 0.9, 4, 16)
    assert calls[:2] == [(0, 4), (4, 4)] and d.attempts > 4 and d.decision == "in_band"


def test_at_the_last_attempt_the_solve_rate_decides() -> None:
    once = [True] + [False] * 7
    for results, decision in ((once + [True, False, False, False], "in_band"),  # 2/12: its interval reaches 0.05
                              (once + [False] * 4, "too_hard"),  # 1/12: below the band
                              ([not r for r in once] + [True] * 4, "too_easy")):  # 11/12
        attempt, calls = _scripted(results)
        d = measure(attempt, (0.1, 0.9), 0.9, 4, 12)
        assert (d.attempts, d.decision) == (12, decision) and (d.low < 0.1 or d.high > 0.9)
        assert calls == [(0, 4), (4, 4), (8, 4)]


def test_infra_errors_are_never_counted_as_attempts() -> None:
    attempt, _ = _scripted([None, None, True, False, True, False, True, False, True, False, True, False] * 3)
    d = measure(attempt, (0.1, 0.9), 0.9, 4, 16)
    assert d.infra_errors == 2 and d.passes * 2 == d.attempts


def test_infra_errors_only_give_no_decision() -> None:
    attempt, _ = _scripted([None] * 100)
    assert measure(attempt, (0.1, 0.9), 0.9, 4, 8).decision == "no_attempts"


def test_cheap_checks(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    check(fn_task(), c)
    with pytest.raises(Rejection, match="entry point"):
        check(fn_task().model_copy(update={"entry_point": "other"}), c)
    with pytest.raises(Rejection) as r:
        check(fn_task(body="import random\n    return x + random.randint(1, 1)"), c)
    assert r.value.reason == "nondeterministic" and "random" in r.value.detail
    with pytest.raises(Rejection) as r:
        check(fn_task(tests=("assert add_one(1) ==",)), c)
    assert r.value.reason == "malformed" and "does not parse" in r.value.detail
    assert sources_used(ast.parse("from urllib.parse import quote")) == set()
    assert sources_used(ast.parse("import urllib.request")) == {"network"}
    with pytest.raises(Rejection, match="/tests"):
        parse_candidate({"family": "L2", "prompt": "x", "output_kind": "function", "entry_point": "f",
                         "reference": "def f(): pass", "tests": []})


def test_structure_hash_ignores_names_but_not_shown_code() -> None:
    a = fn_task("add_one", "return x + 1")
    b = fn_task("plus_one", "return x + 1", tests=("assert plus_one(1) == 2",))
    assert structure_hash(a) == structure_hash(b)
    assert structure_hash(a) != structure_hash(fn_task("add_one", "return x + 2"))
    shown = a.model_copy(update={"prompt": a.prompt + "\n```python\ndef add_one(x):\n    return x - 1\n```"})
    assert structure_hash(shown) != structure_hash(a)


def test_novelty_index_finds_near_duplicates_and_contamination() -> None:
    a = fn_task(prompt="Write a Python function `add_one(x)` that returns the number x plus one, for any integer x.")
    idx = NoveltyIndex([a], ["Write a function to find the shared elements from the given two lists."])
    near = fn_task(body="return 1 + x", prompt=a.prompt.replace("any integer", "every integer"))
    assert idx.duplicate_of(near, 0.5) is not None
    leak = fn_task(prompt="Write a function to find the shared elements from the given two lists. Name it add_one.")
    assert idx.contamination(leak, 0.6) is not None
    assert idx.contamination(a, 0.6) is None


def test_procedural_proposals_are_reproducible_and_valid(tmp_path: Path) -> None:
    c = cfg(tmp_path, budget=24)
    pool = archive.task_pool(c)
    one = plan(c, DiscoveryServices(verifier=None), pool, Journal(tmp_path / "a.jsonl"))
    two = plan(c, DiscoveryServices(verifier=None), pool, Journal(tmp_path / "b.jsonl"))
    assert [p.data for p in one] == [p.data for p in two]
    kinds = {p.proposer for p in one}
    assert {"procedural/instruction", "procedural/function", "procedural/ui", "procedural/bugfix",
            "procedural/compose"} <= kinds
    screened = screen(c, one, pool)
    assert all(isinstance(v, Task) for v in screened.values()), screened


def test_bugfix_mutant_differs_and_is_a_decoy(tmp_path: Path) -> None:
    pool = archive.task_pool(cfg(tmp_path))
    p = procedural.bugfix(pool, 3, 0)
    assert p is not None and p.decoys and p.decoys[0] in p.data["prompt"]
    parent = next(t for t in pool if t.id == p.parents[0])
    assert p.data["reference"] == parent.reference and p.decoys[0] != parent.reference


def test_model_proposal_parsing() -> None:
    seeds = archive.seed_tasks(DiscoveryConfig(run_dir=Path("/tmp"), mbpp_dir=None))
    l2 = [t for t in seeds if t.family == "L2"][:2]
    answer = 'Sure! {"prompt": "Write `sq(x)` returning x*x.", "entry_point": "sq", ' \
             '"reference": "def sq(x):\\n    return x*x", "tests": ["assert sq(3) == 9"]} done'
    obj = model_proposer.first_json_object(answer)
    task = parse_candidate(model_proposer.to_candidate(obj, l2))
    assert task.entry_point == "sq" and task.tests[0].code == "assert sq(3) == 9"
    assert model_proposer.first_json_object("no json here") is None
    prompt = model_proposer.build_prompt("Write a task.", l2)
    assert "Write a task." in prompt and l2[0].reference.splitlines()[0] in json.loads(
        prompt.split("Example 1: ")[1].splitlines()[0])["reference"]


def test_journal_drops_a_torn_tail_and_keeps_one_decision_per_index(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.jsonl")
    j.add_proposal(Proposal(index=0, proposer="x", data={"a": 1}))
    j.add_decision(Decision(index=0, proposer="x", accepted=False, reason="malformed"))
    j.add_decision(Decision(index=0, proposer="x", accepted=True))
    with (tmp_path / "j.jsonl").open("ab") as fh:
        fh.write(b'{"type": "decision", "index": 1, "propo')
    again = Journal(tmp_path / "j.jsonl")
    assert list(again.decisions) == [0] and again.decisions[0].reason == "malformed"
    assert (tmp_path / "j.jsonl").read_bytes().endswith(b"\n")


class _PassRefOnly:
    """Stand-in verifier: the reference passes, every decoy fails (the sandbox is tested elsewhere)."""

    def verify_many(self, jobs):
        from mindforge.tasks.models import Verdict, VerdictStatus

        return [Verdict(task_id=t.id, status=VerdictStatus.PASS if c == t.reference else VerdictStatus.FAIL)
                for t, c in jobs]


class _HalfSolver:
    def attempts(self, task, first, count):
        return [(first + i) % 2 == 0 for i in range(count)]


def test_run_discovery_writes_dataset_with_provenance_and_done(tmp_path: Path) -> None:
    from mindforge.discovery.output import accepted_tasks, finished_result
    from mindforge.discovery.stage import run_discovery

    c = cfg(tmp_path, budget=10, proposers=("procedural",))
    seen: list[tuple[int, int]] = []
    result = run_discovery(c, DiscoveryServices(verifier=_PassRefOnly(), solver=_HalfSolver(), hcp_version="h1",
                                                progress=lambda done, total: seen.append((done, total))))
    # the progress bar: candidates decided of the budget, never backwards, ending at the budget
    assert seen[0] == (0, 10) and seen[-1] == (10, 10) and seen == sorted(seen)
    assert result.accepted == 10 and set(result.by_family) >= {"L0", "L2"} and result.rejected == {}
    tasks = accepted_tasks(c)
    assert len(tasks) == 10 and all(t.provenance.cycle == 1 and t.provenance.hcp_version == "h1" for t in tasks)
    assert all(t.provenance.extra["solve_rate"] == 0.5 and t.provenance.extra["learnability"] == 0.25 for t in tasks)
    bugfix = [t for t in tasks if t.provenance.proposer == "procedural/bugfix"]
    assert bugfix and all(t.provenance.parents for t in bugfix)
    assert finished_result(c) == result


def test_a_failing_model_proposer_does_not_stop_the_stage(tmp_path: Path) -> None:
    async def broken(prompt, seed):
        raise TimeoutError("engine did not answer")

    c = cfg(tmp_path, budget=10, model_share=0.5)
    services = DiscoveryServices(verifier=None, propose_role=broken, log=lambda m: None)
    proposals = plan(c, services, archive.task_pool(c), Journal(tmp_path / "j.jsonl"))
    assert len(proposals) == 10 and all(p.proposer.startswith("procedural/") for p in proposals)


def test_model_proposals_fill_their_slots(tmp_path: Path) -> None:
    async def echo(prompt, seed):
        return '{"prompt": "Write `sq(x)` returning x*x.", "entry_point": "sq", ' \
               '"reference": "def sq(x):\\n    return x*x", "tests": ["assert sq(3) == 9"]}'

    c = cfg(tmp_path, budget=10, model_share=0.5, families=("L2",))
    proposals = plan(c, DiscoveryServices(verifier=None, propose_role=echo), archive.task_pool(c),
                     Journal(tmp_path / "j.jsonl"))
    assert [p.index for p in proposals if p.proposer == "model"] == [1, 3, 5, 7, 9]


class _Always:
    def __init__(self, solved: bool):
        self.solved = solved

    def attempts(self, task, first, count):
        return [self.solved] * count


def test_rounds_cover_the_budget() -> None:
    assert round_ends(DiscoveryConfig(run_dir=Path("/tmp"), budget=20, round_size=8)) == [8, 16, 20]
    assert round_ends(DiscoveryConfig(run_dir=Path("/tmp"), budget=5, round_size=8)) == [5]


def test_later_rounds_draw_the_generators_whose_tasks_are_in_the_band(tmp_path: Path) -> None:
    from mindforge.discovery.stage import run_discovery

    class CountingHalfTheTime:  # the count_* generators in the band, other functions always solved, the rest never
        def attempts(self, task, first, count):
            if "exactly one bug" in task.prompt or task.prompt.startswith("Write both"):
                return [False] * count
            return [not task.entry_point.startswith("count_") or (first + i) % 2 == 0 for i in range(count)]

    c = cfg(tmp_path, budget=96, proposers=("procedural",), families=("L2",), round_size=16)
    run_discovery(c, DiscoveryServices(verifier=_PassRefOnly(), solver=CountingHalfTheTime()))
    j = open_journal(c)
    counting = {v for v in procedural.variants("function") if v.startswith("count_")}
    share = len(counting) / (len(procedural.variants("function")) + 2)  # of the arms, bugfix and compose too
    assert len(counting) >= 5 and share < 0.2

    def counted(indices: range) -> float:
        return sum(j.proposals[i].variant in counting for i in indices) / len(indices)

    assert counted(range(32)) < 0.25 and counted(range(64, 96)) > 0.3  # the first rounds do not know yet
    accepted = {j.proposals[i].variant for i, d in j.decisions.items() if d.accepted}
    assert accepted <= counting and len(accepted) >= 4  # spread over generators, not one with another constant
    assert all(j.proposals[i].level == procedural.variants("function")[j.proposals[i].variant]
               for i in j.proposals if j.proposals[i].variant)


def test_an_arm_is_drawn_on_its_record_its_kind_and_its_level_mates() -> None:
    levels = procedural.variants("function")
    record = {arm: (0.0, 0.0) for arm in [("function", v) for v in levels] + [("bugfix", None)]}
    record[("function", "count_char")] = (3.0, 4.0)
    record[("bugfix", None)] = (0.0, 2.0)
    tried = [v for v in sorted(levels) if v != "count_char"][::3]
    for v in tried:
        record[("function", v)] = (0.0, 1.0)
    by_kind = {"function": (3.0, 4.0 + len(tried)), "bugfix": (0.0, 2.0)}
    draws = collections.Counter(draw_arm(record, by_kind, 0, i) for i in range(1000))
    assert draws.most_common(1)[0] == (("function", "count_char"), draws[("function", "count_char")])
    assert draws[("function", "count_char")] > 150  # 1 of 45 generators
    assert 0 < sum(n for arm, n in draws.items() if record[arm][1] == 0)  # the untried ones get a turn
    assert 0 < draws[("bugfix", None)] < 100
    # the level-1 generators all too easy (tried twice each, never accepted): an untried one at that level
    # is drawn less often than an untried one of a level nobody tried
    record = {arm: (0.0, 2.0 if levels[arm[1]] == 1 else 0.0) for arm in record if arm[1]}
    one, four = [v for v in levels if levels[v] == 1], [v for v in levels if levels[v] == 4]
    record[("function", one[0])] = record[("function", four[0])] = (0.0, 0.0)
    by_kind = {"function": (0.0, sum(n for _, n in record.values()))}
    draws = [draw_arm(record, by_kind, 0, i) for i in range(2000)]
    assert draws.count(("function", one[0])) < draws.count(("function", four[0]))
    assert draws == [draw_arm(record, by_kind, 0, i) for i in range(2000)]  # seeded: a rerun agrees


def test_a_later_cycle_starts_from_the_earlier_cycles_record(tmp_path: Path) -> None:
    from mindforge.discovery.stage import HISTORY_DECAY, run_discovery

    one = cfg(tmp_path, budget=16, proposers=("procedural",), round_size=4)
    run_discovery(one, DiscoveryServices(verifier=_PassRefOnly(), solver=_Always(False)))
    two = one.model_copy(update={"cycle": 2})
    history = earlier_journals(two)
    assert [j.path for j in history] == [open_journal(one).path]
    assert earlier_journals(one) == []
    fresh = Journal(tmp_path / "fresh.jsonl")
    kinds = sorted(procedural.kinds_for(one.families))
    assert kind_record(kinds, fresh) is None  # the run's first round follows the schedule
    own = kind_record(kinds, open_journal(one))
    # a later cycle's first round draws on the last cycle's record weighted by HISTORY_DECAY
    assert own is not None
    assert kind_record(kinds, fresh, history) == {k: (a * HISTORY_DECAY, n * HISTORY_DECAY) for k, (a, n) in own.items()}
    carried = kind_record(kinds, open_journal(one), history)
    assert carried == {k: (a * (1 + HISTORY_DECAY), n * (1 + HISTORY_DECAY)) for k, (a, n) in own.items()}
    tried = arm_record(kinds, open_journal(one))
    assert sum(n for _, n in tried.values()) == 16 and all(a == 0 for a, _ in tried.values())
    assert arm_record(kinds, fresh, history) == {arm: (a, n * HISTORY_DECAY) for arm, (a, n) in tried.items()}
    # cycle 2's plan repeats none of the candidates cycle 1 judged
    proposals = plan(two, DiscoveryServices(verifier=None), archive.task_pool(two), open_journal(two))
    judged = {structure_hash(parse_candidate(p.data)) for p in open_journal(one).proposals.values() if p.data}
    assert len(proposals) == 16
    assert not judged & {structure_hash(parse_candidate(p.data)) for p in proposals}


def test_later_rounds_favour_the_kinds_that_yield_learnable_tasks(tmp_path: Path) -> None:
    from mindforge.discovery.stage import run_discovery

    class FunctionsHalfTheTime:
        def attempts(self, task, first, count):
            return [task.output_kind == "function" and "exactly one bug" not in task.prompt and (first + i) % 2 == 0
                    for i in range(count)]

    c = cfg(tmp_path, budget=40, proposers=("procedural",), round_size=8)
    run_discovery(c, DiscoveryServices(verifier=_PassRefOnly(), solver=FunctionsHalfTheTime()))
    j = open_journal(c)
    first = [j.proposals[i].proposer for i in range(8)]
    later = [j.proposals[i].proposer for i in range(8, 40)]
    assert len(set(first)) == 5  # the first round follows the schedule: every kind
    assert later.count("procedural/function") > len(later) / 2, later
    assert {j.proposals[i].proposer for i, d in j.decisions.items() if d.accepted} <= {
        "procedural/function", "procedural/compose"}


def test_a_model_that_keeps_writing_malformed_proposals_gives_its_slots_away(tmp_path: Path) -> None:
    from mindforge.discovery.stage import run_discovery

    asked: list[int] = []

    async def rambling(prompt, seed):
        asked.append(seed)
        return "I am not sure what task to write."

    c = cfg(tmp_path, budget=24, model_share=0.25, round_size=8)
    run_discovery(c, DiscoveryServices(verifier=_PassRefOnly(), solver=_HalfSolver(), propose_role=rambling))
    j = open_journal(c)
    model = [i for i, p in j.proposals.items() if p.proposer == "model"]
    assert model == [3, 7] and len(asked) == 2  # rounds 2 and 3 asked nothing
    assert all(j.decisions[i].reason == "malformed" for i in model) and len(j.decisions) == 24


def test_composed_tasks_keep_their_parents_declarations() -> None:
    a = fn_task("roll", "return random.randint(1, x)", ("assert 1 <= roll(6) <= 6",))
    a = a.model_copy(update={"declares": ("random",)})
    b = fn_task("twice", "return 2 * x", ("assert twice(2) == 4",))
    for index in range(20):
        p = procedural.compose([a, b], index, 0, ("L2",))
        if p is not None:
            assert p.data["declares"] == ["random"]
            return
    pytest.fail("compose never paired the two tasks")



def test_date_arithmetic_is_not_the_clock_but_reading_it_is() -> None:
    assert sources_used(ast.parse("import datetime\nd = datetime.date(2024, 1, 1) + datetime.timedelta(days=3)")) \
        == set()
    assert sources_used(ast.parse("import datetime\nd = datetime.datetime.now()")) == {"clock"}
    assert sources_used(ast.parse("from datetime import date\nd = date.today()")) == {"clock"}
