"""Update's rejection-sampling and router phases over the stand-ins (tests/update_standins.py).

The trainer is the real ``GRPOTrainer`` on a tiny random Llama; the engine is
the stand-in that serves the catalog's peft folders; verdicts pass completions
whose ids are all below 48. The router's decisions are a stand-in too: the
route the served L0 adapter gives the most probability among the labels'
first ids (so training moves them), which is what makes the phase's
measure-train-measure loop checkable without the real engine. The real phases
run in the deployed cycle of tests/e2e_cycle.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from update_standins import (
    StandInEngine,
    fresh_adapter,
    grpo_trainer,
    prompt_ids,
    services,
    tiny_base,
)

from mindforge.catalog import AdapterCatalog, copy_adapter
from mindforge.engine.admin import EngineAdmin
from mindforge.hcp import load_hcp, read_json
from mindforge.paths import default_hcp_path
from mindforge.store import read_parquet
from mindforge.tasks.models import Task, Trajectory
from mindforge.update.stage import UpdateConfig, run_update

LABEL_IDS = {"L0": (60, 61), "L1": (60, 62), "L2": (60, 63), "L3": (60, 64)}


@pytest.fixture(scope="module")
def base_path(tmp_path_factory) -> Path:
    return tiny_base(tmp_path_factory.mktemp("base"))


def _catalog(tmp: Path, base_path: Path, routes: tuple[str, ...]) -> tuple[AdapterCatalog, EngineAdmin]:
    fresh = fresh_adapter(base_path, tmp / "fresh")
    catalog = AdapterCatalog(tmp / "adapters")
    engine = EngineAdmin("http://engine", transport=httpx.MockTransport(StandInEngine(base_path).handle))
    for r in routes:
        v0 = catalog.save(r, copy_adapter(fresh), prefix=f"mf-{r}")
        engine.load(v0.name, v0.path)
    return catalog, engine


def test_rejection_sampling_trains_on_passes_and_points_grpo_at_spread(tmp_path: Path, base_path: Path) -> None:
    catalog, engine = _catalog(tmp_path, base_path, ("L2",))
    config = UpdateConfig(run_dir=tmp_path, cycle=1, steps=1, group_size=4, batch_tasks=2, reward="pass_fraction",
                          validation_tasks=2, validation_samples=1, probe_prompts=1, regression_tolerance=1.0,
                          router={"enabled": False}, grpo={"lr": 0.05},
                          rft={"attempts": 6, "max_tasks": 6, "epochs": 2, "batch_size": 4, "lr": 0.05,
                               "temperature": 1.0})
    svc = services(catalog, engine, base_path, read_json(default_hcp_path()), grpo_trainer)
    svc.verifier.verify_many = lambda jobs: [_verdict(task, int(answer.split()[0]) < 48) for task, answer in jobs]
    result = run_update(config, svc)
    rft = result.rft
    assert rft is not None and rft.tasks == 6 and rft.attempts == 36
    attempts = read_parquet(tmp_path / "cycles/1/update/trajectories/rft-attempts.parquet", Trajectory)
    passes = [t for t in attempts if t.verdict.status == "pass"]
    assert rft.passes == len(passes) > 0 and 0 < rft.kept <= min(len(passes), 2 * rft.tasks_with_pass)
    assert rft.steps == 2 * -(-rft.kept // 4) and len(rft.losses) == rft.steps
    # GRPO's tasks are the ones whose attempts split into passes and fails, when there are any.
    step0 = read_parquet(tmp_path / "cycles/1/update/trajectories/train-step000.parquet", Trajectory)
    if rft.spread_tasks:
        assert {t.task_id for t in step0} <= set(rft.spread_tasks)
        # ... and its rollouts came from the fine-tuned weights, served under a scratch name.
        assert {t.hops[0].adapter for t in step0} == {"mf-L2-train-1-000"}
    assert json.loads((tmp_path / "cycles/1/update/DONE.json").read_text())["rft"]["kept"] == rft.kept
    assert catalog.get("L2", 1).meta.metrics["rft"]["passes"] == rft.passes


def test_a_step_without_passes_is_reported_not_hidden(tmp_path: Path, base_path: Path) -> None:
    catalog, engine = _catalog(tmp_path, base_path, ("L2",))
    svc = services(catalog, engine, base_path, read_json(default_hcp_path()), grpo_trainer)
    svc.verifier.verify_many = lambda jobs: [_verdict(task, False) for task, _ in jobs]
    config = UpdateConfig(run_dir=tmp_path, cycle=1, steps=0, group_size=2, validation_tasks=1, validation_samples=1,
                          probe_prompts=1, validate_after=False, router={"enabled": False},
                          rft={"attempts": 2, "max_tasks": 2})
    result = run_update(config, svc)
    assert result.rft.passes == 0 and result.rft.kept == 0 and result.rft.steps == 0
    assert "no attempt passed" in result.rft.reason


@pytest.mark.parametrize("reuse", [True, False])
def test_discoverys_verified_attempts_on_training_tasks_join_the_passes(tmp_path: Path, base_path: Path,
                                                                       reuse: bool) -> None:
    """Every attempt of the phase fails; Discovery's stored passes on L2 still train, held-out tasks' never."""
    from mindforge.paths import seed_tasks_dir
    from mindforge.rollouts import persist
    from mindforge.tasks.io import load_tasks
    from mindforge.tasks.models import Hop

    catalog, engine = _catalog(tmp_path, base_path, ("L2",))
    svc = services(catalog, engine, base_path, read_json(default_hcp_path()), grpo_trainer)
    svc.verifier.verify_many = lambda jobs: [_verdict(task, False) for task, _ in jobs]
    # max_difficulty 2 below: the harder seeds are not Update's tasks at all.
    seeds = [t for t in load_tasks(seed_tasks_dir()) if t.family == "L2" and (t.provenance.difficulty or 1) <= 2]

    def attempt(task, route: str, ok: bool, sample: int) -> Trajectory:
        hop = Hop(kind="answer", route=route, adapter=f"mf-{route}-v0000", prompt_ids=tuple(prompt_ids(task)),
                  completion_ids=(5, 6, 7 + sample), logprobs=(-1.0, -1.0, -1.0), finish_reason="stop", duration_s=0.1)
        return Trajectory(task_id=task.id, hcp_version="h", route=route, sample=sample, hops=(hop,),
                          answer=f"answer {sample}", verdict=_verdict(task, ok), reward=float(ok))

    # Per task: a pass on L2, a pass the router sent to L0 (no L2 tokens to learn), a fail.
    persist([[attempt(t, "L2", True, 0), attempt(t, "L0", True, 1), attempt(t, "L2", False, 2)] for t in seeds],
            tmp_path / "cycles/1/discovery/trajectories", "attempts")
    # Candidates Discovery rejected: verified and too easy (its passes are correct programs), verified of another
    # family, one whose reference failed (its "passes" prove nothing), and one above max_difficulty.
    from mindforge.store import write_parquet
    from mindforge.tasks.decisions import Decision

    def candidate(i: int, family: str, reason: str, attempts: int | None, difficulty: int = 1) -> Task:
        task = Task(family=family, prompt=f"Write a Python function `plus_{i}(x)` that adds {i}.",
                    output_kind="function", entry_point=f"plus_{i}", reference=f"def plus_{i}(x):\n    return x + {i}\n",
                    tests=[{"name": "t0", "code": f"assert plus_{i}(1) == {i + 1}"}],
                    provenance={"difficulty": difficulty})
        decisions.append(Decision(index=i, proposer="procedural/function", accepted=False, reason=reason,
                                  task_id=task.id, family=family, task=task.model_dump(mode="json"),
                                  passes=attempts, attempts=attempts))
        return task

    decisions: list[Decision] = []
    rejects = [candidate(1, "L2", "too_easy", 4), candidate(2, "L1", "too_easy", 4),
               candidate(3, "L2", "reference_fails", None), candidate(4, "L2", "too_hard", 4),
               candidate(5, "L2", "too_easy", 4, difficulty=3)]
    write_parquet(decisions, tmp_path / "cycles/1/discovery/rejected.parquet")
    persist([[attempt(t, "L2", True, 0), attempt(t, "L2", True, 1)] for t in rejects],
            tmp_path / "cycles/1/discovery/trajectories", "rejects")
    config = UpdateConfig(run_dir=tmp_path, cycle=1, steps=0, group_size=2, validation_tasks=3, validation_samples=1,
                          probe_prompts=1, validate_after=False, router={"enabled": False}, max_difficulty=2,
                          rft={"attempts": 1, "max_tasks": 2, "epochs": 1, "batch_size": 128,
                               "reuse_discovery": reuse})
    rft = run_update(config, svc).rft
    assert rft.passes == 0  # the phase's own attempts all failed
    if reuse:  # Discovery's L2 passes on every training task joined, and the two distinct passes of each measured
        # L2 reject (too easy, too hard); the 3 held-out tasks', the L1 reject's, the unverified one's and the
        # too difficult one's did not
        assert rft.reject_passes == 4
        assert rft.discovery_passes == rft.kept == len(seeds) - 3 + 4 and rft.steps == 1
    else:
        assert rft.discovery_passes == rft.kept == rft.steps == 0 and "no attempt passed" in rft.reason
    from mindforge.update.rft import discovery_passes

    # No ids: every task with a pass on the route (what the learning-rate sweep reads).
    every = discovery_passes(tmp_path / "cycles/1/discovery/trajectories", None, "L2")
    assert set(every) == {t.id for t in [*seeds, *rejects]} and all(len(v) in (1, 2) for v in every.values())


def _verdict(task, ok: bool):
    """A whole pass or a fail (stand-in: the first completion id decides)."""
    from mindforge.tasks.models import TestOutcome, TestResult, Verdict, VerdictStatus

    return Verdict(task_id=task.id, status=VerdictStatus.PASS if ok else VerdictStatus.FAIL,
                   tests=(TestResult(name="t0", outcome=TestOutcome.PASS if ok else TestOutcome.FAIL),))


def test_router_training_measures_trains_and_promotes_l0(tmp_path: Path, base_path: Path) -> None:
    import torch

    catalog, engine = _catalog(tmp_path, base_path, ("L0", "L2"))
    from update_standins import load_policy

    def routes_of(doc, tasks):
        """The label whose ids the served L0 adapter finds likeliest after the task's route prompt."""
        entry = catalog.find(doc["router"]["routes"]["L0"]["served_adapter"])
        model = load_policy(base_path, entry.path)
        out = []
        with torch.no_grad():
            for t in tasks:
                scores = {}
                for label, ids in LABEL_IDS.items():
                    seq = torch.tensor([prompt_ids(t) + list(ids)])
                    logp = torch.log_softmax(model(seq).logits[0, -3:-1], -1)
                    scores[label] = float(logp[0, ids[0]] + logp[1, ids[1]])
                out.append(max(scores, key=scores.get))
        return out

    svc = services(catalog, engine, base_path, read_json(default_hcp_path()), grpo_trainer)
    svc.routes_of = routes_of
    svc.render_route = lambda doc, task, label: (prompt_ids(task), LABEL_IDS[label])
    config = UpdateConfig(run_dir=tmp_path, cycle=1, steps=0, validation_tasks=1, validation_samples=1,
                          probe_prompts=1, validate_after=False, rft={"enabled": False},
                          router={"threshold": 1.0, "validation_per_family": 3, "train_per_family": 8,
                                  "epochs": 4, "batch_size": 8, "lr": 0.03})
    result = run_update(config, svc)
    r = result.router
    assert r is not None and r.trained and set(r.before) == {"L0", "L1", "L2", "L3"} and r.validation_tasks == 12
    assert r.train_tasks == 8 + 8 + 8 + 7 and len(r.losses) == r.steps == 16 and r.losses[-1] < r.losses[0]
    assert r.accuracy_after is not None
    # Promoted only on a strict gain: a route hop that routes no better only moves requests around.
    assert r.promoted == (r.accuracy_after > r.accuracy_before), r.reason
    if r.promoted:  # the HCP it left serves the new L0, and Update's result names that HCP
        assert load_hcp(r.hcp_path).served_adapter("L0") == "mf-L0-v0001" == r.version
        assert result.hcp_path == Path(r.hcp_path) or load_hcp(result.hcp_path).served_adapter("L0") == r.version
    # A rerun of the stage reuses the phase's measurement instead of training again.
    assert json.loads((tmp_path / "cycles/1/update/router.json").read_text())["steps"] == 16
    # The cycle's routing numbers are a point on the run's TensorBoard curve (step = cycle).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard" / "routing"))
    events.Reload()
    for tag, value in r.scalars().items():
        assert [(e.step, round(e.value, 4)) for e in events.Scalars(tag)] == [(1, round(value, 4))], tag
    assert {"routing/accuracy_before", "routing/accuracy_after", "routing/after/L2"} <= set(r.scalars())
