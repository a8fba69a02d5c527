"""One hand-made candidate per rejection reason, judged by the real stage code.

Cheap-check and novelty reasons need nothing running; sandbox reasons
(flaky, non-discriminating, reference fails) run in the real Docker sandbox;
too easy / too hard use a scripted solver, because what is tested is the
decision made from the attempts (the model's attempts are exercised by the
command-level test).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mindforge.discovery import archive
from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.proposers.base import Proposal
from mindforge.discovery.stage import DiscoveryServices, judge, screen
from mindforge.tasks.models import Task

GOOD = {"family": "L2", "prompt": "Write a Python function `triple(x)` that returns three times x.",
        "output_kind": "function", "entry_point": "triple", "reference": "def triple(x):\n    return 3 * x\n",
        "tests": [{"name": "t1", "code": "assert triple(2) == 6"}, {"name": "t2", "code": "assert triple(-1) == -3"}]}


def cfg(tmp_path: Path, **kw) -> DiscoveryConfig:
    return DiscoveryConfig(run_dir=tmp_path, cycle=1, mbpp_dir=None, **kw)


def screened(tmp_path: Path, data, **kw):
    c = cfg(tmp_path, **kw)
    out = screen(c, [Proposal(index=0, proposer="hand", data=data)], archive.task_pool(c))[0]
    return out


@pytest.mark.parametrize("data, detail", [
    (None, "no JSON object"),
    ({"family": "L2", "prompt": "x"}, "/output_kind"),
    ({**GOOD, "reference": "def other(x):\n    return 3 * x\n"}, "entry point triple"),
    ({**GOOD, "tests": [{"name": "t1", "code": "assert triple(2) =="}]}, "does not parse"),
    ({**GOOD, "prompt": "x" * 5000 + " triple"}, "prompt has 5007 characters"),
])
def test_malformed(tmp_path: Path, data, detail: str) -> None:
    out = screened(tmp_path, data)
    assert out.reason == "malformed" and detail in out.detail


def test_nondeterministic_unless_declared(tmp_path: Path) -> None:
    data = {**GOOD, "reference": "import time\n\ndef triple(x):\n    time.sleep(0)\n    return 3 * x\n"}
    assert screened(tmp_path, data).reason == "nondeterministic"
    assert isinstance(screened(tmp_path, {**data, "declares": ["clock"]}), Task)


def test_duplicate_of_a_seed_task_with_names_changed(tmp_path: Path) -> None:
    seed = next(t for t in archive.task_pool(cfg(tmp_path)) if t.entry_point == "clamp")
    renamed = seed.reference.replace("value", "v").replace("clamp", "limit_value")
    data = {**GOOD, "prompt": "Write `limit_value(v, low, high)`: keep v within [low, high].",
            "entry_point": "limit_value", "reference": renamed,
            "tests": [{"name": "t", "code": "assert limit_value(5, 0, 3) == 3"}]}
    out = screened(tmp_path, data)
    assert out.reason == "duplicate" and seed.id in out.detail


def test_near_duplicate_prompt_and_tests(tmp_path: Path) -> None:
    seed = next(t for t in archive.task_pool(cfg(tmp_path)) if t.family == "L0")
    data = {**seed.model_dump(mode="json"), "prompt": seed.prompt + " Please.", "reference": "- Cools you down\n- Clears the skin\n- Gives energy"}
    data.pop("id")
    out = screened(tmp_path, data)
    assert out.reason == "duplicate" and "near" in out.detail


def test_contaminated_by_an_evaluation_prompt(tmp_path: Path) -> None:
    evalset = tmp_path / "eval.jsonl"
    evalset.write_text(json.dumps({"prompt": "Write a function to find the shared elements from the given two "
                                             "lists."}) + "\n")
    data = {**GOOD, "prompt": "Write a function to find the shared elements from the given two lists. "
                              "Call it triple."}
    out = screened(tmp_path, data, decontaminate=(evalset,))
    assert out.reason == "contaminated"


# ------------------------------------------------------------------ sandbox and solver reasons
class Scripted:
    def __init__(self, result: bool):
        self.result, self.calls = result, 0

    def attempts(self, task, first, count):
        self.calls += count
        return [self.result] * count


@pytest.fixture(scope="module")
def pool():
    from mindforge.sandbox import SandboxConfig, SandboxPool

    with SandboxPool(SandboxConfig(pool_size=2)) as p:
        yield p


def judged(tmp_path: Path, pool, data, solver=None, **kw):
    c = cfg(tmp_path, **kw)
    task = Task.model_validate(data)
    return judge(c, DiscoveryServices(verifier=pool, solver=solver), Proposal(index=0, proposer="hand", data=data),
                 task, {})


def test_flaky_reference(tmp_path: Path, pool) -> None:
    data = {**GOOD, "declares": ["random"],
            "tests": [*GOOD["tests"], {"name": "coin", "code": "import random\nassert random.random() < 0.5"}]}
    d = judged(tmp_path, pool, data, reference_runs=12)  # all 12 runs agreeing by chance: p = 2 / 4096
    assert not d.accepted and d.reason == "flaky", d


def test_reference_that_fails(tmp_path: Path, pool) -> None:
    d = judged(tmp_path, pool, {**GOOD, "reference": "def triple(x):\n    return 2 * x\n"})
    assert d.reason == "reference_fails"


@pytest.mark.parametrize("tests, decoy", [
    ([{"name": "t", "code": "assert triple(1) is None or triple(1) == 3"}], "no-op"),
    ([{"name": "t", "code": "assert triple(0) == 0"}], "constant 0"),
])
def test_non_discriminating(tmp_path: Path, pool, tests, decoy: str) -> None:
    d = judged(tmp_path, pool, {**GOOD, "tests": tests})
    assert d.reason == "non_discriminating" and decoy in d.detail


def test_too_easy_and_too_hard_stop_early(tmp_path: Path, pool) -> None:
    easy, hard = Scripted(True), Scripted(False)
    d = judged(tmp_path, pool, GOOD, solver=easy)
    assert d.reason == "too_easy" and d.attempts == 4 and easy.calls == 4
    d = judged(tmp_path, pool, GOOD, solver=hard)
    assert d.reason == "too_hard" and d.solve_rate == 0.0 and d.interval[1] < 0.5


def test_a_sound_task_in_band_is_accepted_with_its_log(tmp_path: Path, pool) -> None:
    class Alternating:
        def attempts(self, task, first, count):
            return [(first + i) % 2 == 0 for i in range(count)]

    d = judged(tmp_path, pool, GOOD, solver=Alternating())
    assert d.accepted and d.solve_rate == 0.5 and d.learnability == 0.25
    assert any(line.startswith("reference run 2: pass") for line in d.log)
    assert any(line.startswith("no-op: fail") for line in d.log)


def test_contaminated_by_the_shared_mbpp_set(tmp_path: Path) -> None:
    c = DiscoveryConfig(run_dir=tmp_path, cycle=1)  # the default: ../shared/data/mbpp/ when present
    sources = archive.eval_sources(c)
    if not sources:
        pytest.skip("../shared/data/mbpp/ is not present on this machine")
    data = {**GOOD, "prompt": "Write a function to find the shared elements from the given two lists. "
                              "Name it triple."}
    out = screen(c, [Proposal(index=0, proposer="hand", data=data)], archive.task_pool(c))[0]
    assert out.reason == "contaminated"


def test_every_generated_kind_and_level_is_sound_in_the_sandbox(tmp_path: Path, pool) -> None:
    """Each generator's reference passes its tests twice and every decoy (no-op, constants, echo) fails."""
    from mindforge.discovery.proposers import procedural

    c = cfg(tmp_path)
    for kind in procedural.LEVELLED:
        for variant, level in procedural.variants(kind).items():
            for index in range(8 if kind != "function" else 1):  # every function variant: the next test
                p = procedural.propose(kind, [], index, 7, variant=variant)
                assert p.level == level and p.variant == variant and p.proposer == f"procedural/{kind}"
                task = Task.model_validate(p.data)
                d = judge(c, DiscoveryServices(verifier=pool), p, task, {})
                assert d.accepted, (kind, level, task.prompt, d.reason, d.detail)


def test_every_function_kind_is_sound_in_the_sandbox_and_the_kinds_are_many(tmp_path: Path, pool) -> None:
    """Each function kind of each level, at two constants: its reference passes and its decoys fail. The
    kinds exist so that a cycle's budget yields distinct tasks, not one generator with another constant."""
    import random

    from mindforge.discovery.proposers.instructions import FUNCTION_KINDS, function_task

    c = cfg(tmp_path)
    prompts = set()
    for level, kinds in FUNCTION_KINDS.items():
        assert len(kinds) >= 6, level
        for kind in kinds:
            for draw in range(2):
                data = function_task(random.Random(f"{level}|{kind}|{draw}"), level, kind)
                task = Task.model_validate(data)
                prompts.add(task.prompt)
                p = Proposal(index=0, proposer="procedural/function", level=level, data=data)
                d = judge(c, DiscoveryServices(verifier=pool), p, task, {})
                assert d.accepted, (level, kind, task.prompt, d.reason, d.detail)
    assert len(prompts) >= 40  # distinct tasks, not repeats
