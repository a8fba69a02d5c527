"""The Discovery stage: propose, check, verify, measure, dedupe, archive.

``run_discovery(config, services)`` judges ``config.budget`` candidates:

1. ``plan``: candidate ``i`` comes from a procedural proposer (no model) or,
   for a share of the budget, from the model's ``propose`` role; every
   proposal is journaled before it is judged, so a rerun judges the same one.
   The budget is planned in rounds of ``round_size``: the kinds of the next
   round, and each generated kind's generator (its variant, which sets the
   difficulty level), are drawn by Thompson sampling on their acceptances,
   so the budget goes where the current model is near its band, whatever
   its size. Both start from the run's earlier cycles (their journals, the
   older the lighter), so a later cycle does not relearn them;
2. ``screen`` (cheap, no container, deterministic): parse and schema, sizes,
   banned nondeterminism, then novelty against the archive and the earlier
   candidates of this cycle, then decontamination;
3. ``judge`` (per candidate, in parallel through ``services.mapper``): sandbox
   verification (reference twice, decoys), then the solve rate of the current
   model through the harness; each decision is journaled, in this process, as
   soon as the mapper returns it. The default mapper is a thread pool on these
   services; a mapper that leaves the process (the flow's Dask or Ray workers)
   runs ``services.judge``, a job that carries its inputs as data
   (``Candidate``) and builds its services where it runs;
4. ``finish``: accepted tasks with provenance to ``tasks/accepted.parquet``,
   rejected candidates to ``rejected.parquet``, the result to ``DONE.json``.

The flow (``mindforge/flows/discovery.py``) runs the same function; on a
Dask or Ray task runner it hands over a mapper that makes each judgement a
Prefect task.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from mindforge.discovery import archive
from mindforge.discovery.checks import Rejection, check, parse_candidate
from mindforge.discovery.config import DiscoveryConfig
from mindforge.discovery.difficulty import measure
from mindforge.discovery.journal import Journal
from mindforge.discovery.novelty import NoveltyIndex, eval_prompts, structure_hash
from mindforge.discovery.output import finish
from mindforge.discovery.proposers import model as model_proposer
from mindforge.discovery.proposers import procedural
from mindforge.discovery.proposers.base import Proposal
from mindforge.discovery.records import DiscoveryResult
from mindforge.discovery.verify import InfraError, verify
from mindforge.errors import MindForgeError
from mindforge.fanout import Mapper, ThreadMapper
from mindforge.rollouts import Verifier
from mindforge.store import RunDir
from mindforge.tasks.benchmarks import SealedSet
from mindforge.tasks.decisions import Decision
from mindforge.tasks.models import Task

# Candidates judged at once: each samples ``min_samples`` (4) attempts together, so 16 fill the engine's
# 64-sequence batch (measured at 8 in flight: a decode batch of 8 sequences on average, the engine busy 93%
# of Discovery's time at a third of the tokens a step it can take).
JUDGES_IN_FLIGHT = 16


class Solver(Protocol):
    """The current model attempting a task: one entry per attempt, True pass, False fail, None infra error."""

    def attempts(self, task: Task, first: int, count: int) -> list[bool | None]: ...


class Candidate(BaseModel):
    """A screened candidate to judge, as data: the proposal, its task, the parent it must be harder than."""

    model_config = ConfigDict(frozen=True)

    proposal: Proposal
    task: Task
    parent: Task | None = None


@dataclass
class DiscoveryServices:
    verifier: Verifier | None  # None where candidates are judged elsewhere (``judge`` set)
    solver: Solver | None = None
    propose_role: model_proposer.ProposeRole | None = None
    propose_instructions: str = ""
    hcp_version: str | None = None
    log: Callable[[str], None] = lambda m: None
    progress: Callable[[int, int], None] | None = None  # (candidates decided, budget), for a progress bar
    # Where candidates are judged: ``mapper`` runs ``judge`` (Candidate -> Decision, None on persistent
    # infrastructure errors) over them; without ``judge``, ``judge_with_retries`` on these services.
    mapper: Mapper = field(default_factory=lambda: ThreadMapper(JUDGES_IN_FLIGHT))
    judge: Callable[[Candidate], Decision | None] | None = None
    infra_retries: int = 2
    # Sealed benchmarks (mindforge.tasks.benchmarks): decontaminated against, never a seed or a parent.
    sealed_sources: tuple[Path, ...] = ()
    sealed: SealedSet | None = None


def stage_dir(config: DiscoveryConfig) -> Path:
    return RunDir(config.run_dir).stage(config.cycle, "discovery")


def open_journal(config: DiscoveryConfig) -> Journal:
    return Journal(stage_dir(config) / "journal.jsonl")


def _is_model_slot(config: DiscoveryConfig, index: int) -> bool:
    if "model" not in config.proposers or config.model_share <= 0:
        return False
    if "procedural" not in config.proposers or config.model_share >= 1:
        return True
    step = max(1, round(1 / config.model_share))
    return index % step == step - 1


def earlier_journals(config: DiscoveryConfig) -> list[Journal]:
    """The Discovery journals of this run's earlier cycles, oldest first.

    The model has changed since, but which kinds and generators yielded tasks
    in its band is the best first guess for this cycle: without them every
    cycle's first round spent half its budget relearning that the bugfix and
    compose kinds were out of reach (measured: 8 to 12 of 20 candidates a
    cycle, none accepted).
    """
    run = RunDir(config.run_dir)
    paths = (run.stage(c, "discovery") / "journal.jsonl" for c in range(1, config.cycle))
    return [Journal(p) for p in paths if p.exists()]


HISTORY_DECAY = 0.5  # the weight of a decision one cycle older: the model it measured has been trained since
LEVEL_POOLING = 0.25  # the weight an arm's level-mates' record has in its own prior
PRIOR_STRENGTH = 4.0  # candidates' worth of the kind's acceptance rate in an arm's prior


def _weighted(journal: Journal, history: Sequence[Journal]):
    """(weight, proposal or None, decision) over this cycle's journal and the earlier ones, each cycle back
    weighted by ``HISTORY_DECAY`` once more."""
    for age, j in enumerate(reversed([*history, journal])):
        weight = HISTORY_DECAY ** age
        for i, d in j.decisions.items():
            yield weight, j.proposals.get(i), d


def kind_record(kinds: Sequence[str], journal: Journal,
                history: Sequence[Journal] = ()) -> dict[str, tuple[float, float]] | None:
    """Each procedural kind's (accepted, decided) candidates so far, the earlier cycles' weighted by
    ``HISTORY_DECAY``; None before any decision."""
    stats = {k: [0.0, 0.0] for k in kinds}
    for weight, _, d in _weighted(journal, history):
        kind = d.proposer.removeprefix("procedural/")
        if kind in stats:
            stats[kind][0] += weight * int(d.accepted)
            stats[kind][1] += weight
    if not any(n for _, n in stats.values()):
        return None
    return {k: (a, n) for k, (a, n) in stats.items()}


Arm = tuple[str, str | None]
"""A generator the plan draws: (procedural kind, variant); the variant is None for a pool-derived kind."""


def arms(kinds: Sequence[str]) -> list[Arm]:
    return [(k, v) for k in dict.fromkeys(kinds) for v in (procedural.variants(k) or [None])]


def arm_record(kinds: Sequence[str], journal: Journal, history: Sequence[Journal] = ()) -> dict[Arm, tuple[float, float]]:
    """Each arm's (accepted, decided) candidates, weighted as in ``kind_record``.

    Every decision counts: a duplicate or a non-discriminating task says the
    generator has nothing new to give, as a too-easy one says it is out of
    the band.
    """
    stats = {arm: [0.0, 0.0] for arm in arms(kinds)}
    for weight, p, d in _weighted(journal, history):
        kind = d.proposer.removeprefix("procedural/")
        arm = (kind, p.variant if p is not None and procedural.variants(kind) else None)
        if arm in stats:
            stats[arm][0] += weight * int(d.accepted)
            stats[arm][1] += weight
    return {arm: (a, n) for arm, (a, n) in stats.items()}


def draw_arm(record: dict[Arm, tuple[float, float]], by_kind: dict[str, tuple[float, float]], seed: int,
             index: int) -> Arm:
    """Thompson sampling over every generator of every kind on its acceptances.

    A small model's solve rate jumps between neighbouring generators (add_k
    always solved, char_at_k never, count_c about half), so the draw is per
    generator, not per kind or level. Each arm's Beta posterior on its
    accepted and rejected candidates starts from a prior worth
    ``PRIOR_STRENGTH`` candidates at its kind's acceptance rate so far (a
    kind has tens of generators: a uniform prior would spend a cycle trying
    each before using the ones found in the band), plus its level-mates'
    record weighted by ``LEVEL_POOLING``. A generator never accepted still
    gets a slot now and then, so one the model grows into is found, and the
    draws of a round spread over the generators that did well, so no one
    generator's few distinct tasks are asked for again and again. Seeded by
    the candidate index: a rerun draws the same.
    """
    levels: dict[tuple[str, int], list[float]] = {}
    for (kind, v), (a, n) in record.items():
        if v is not None:
            tot = levels.setdefault((kind, procedural.variants(kind)[v]), [0.0, 0.0])
            tot[0] += a
            tot[1] += n
    rng = procedural.rng_for(seed, index, "arm")

    def draw(arm: Arm) -> float:
        (kind, v), (a, n) = arm, record[arm]
        ka, kn = by_kind.get(kind, (0.0, 0.0))
        mean = (ka + 1) / (kn + 2)
        a0 = n0 = 0.0
        if v is not None:
            la, ln = levels[(kind, procedural.variants(kind)[v])]
            a0, n0 = LEVEL_POOLING * (la - a), LEVEL_POOLING * (ln - n)
        return rng.betavariate(a + a0 + PRIOR_STRENGTH * mean, (n - a) + (n0 - a0) + PRIOR_STRENGTH * (1 - mean))

    return max(sorted(record, key=lambda arm: (arm[0], arm[1] or "")), key=draw)


MODEL_MALFORMED_LIMIT = 2


def model_gave_up(journal: Journal) -> bool:
    """The model's last ``MODEL_MALFORMED_LIMIT`` proposals this cycle were all malformed: a model that
    cannot write the format yet (a small default) would spend the rest of its share on nothing."""
    mine = [journal.decisions[i] for i in sorted(journal.decisions) if journal.decisions[i].proposer == "model"]
    recent = mine[-MODEL_MALFORMED_LIMIT:]
    return len(recent) == MODEL_MALFORMED_LIMIT and all(d.reason == "malformed" for d in recent)


def round_ends(config: DiscoveryConfig) -> list[int]:
    """Where each planning round ends: candidates ``[previous end, end)`` are planned together."""
    return [*range(config.round_size, config.budget, config.round_size), config.budget]


def plan(config: DiscoveryConfig, services: DiscoveryServices, pool: Sequence[Task], journal: Journal,
         upto: int | None = None) -> list[Proposal]:
    """Proposals ``[0, upto)`` of the budget, taken from the journal where a previous run made them.

    Model proposals are sampled together (the engine batches them); new
    procedural ones get their kind's staircase level from ``levels``.
    """
    upto = config.budget if upto is None else min(upto, config.budget)
    kinds = procedural.kinds_for(config.families) or ["instruction"]
    model_slots = [i for i in range(upto) if i not in journal.proposals and _is_model_slot(config, i)]
    if model_slots and services.propose_role is not None and model_gave_up(journal):
        services.log(f"the model's last {MODEL_MALFORMED_LIMIT} proposals were malformed; "
                     f"candidates {model_slots} are procedural instead")
        model_slots = []
    if model_slots and services.propose_role is not None:
        async def all_model() -> list[Proposal | BaseException]:
            return list(await asyncio.gather(*(model_proposer.propose(
                services.propose_role, services.propose_instructions, pool, i, config.seed, config.examples,
                config.families) for i in model_slots), return_exceptions=True))

        for i, p in zip(model_slots, asyncio.run(all_model()), strict=True):
            if isinstance(p, BaseException):
                # An engine failure is not the model's proposal: the slot is filled procedurally
                # (journaled, so a rerun judges the same candidate) and the stage goes on.
                services.log(f"model proposal {i} failed ({type(p).__name__}: {p}); a procedural one instead")
                continue
            journal.add_proposal(p)
    history = earlier_journals(config)
    # An earlier cycle's candidate is not judged again: the procedural proposers draw from (seed, index,
    # kind, level), so without this a cycle repeated most of the last one's (measured: 13 to 14 of 20), and
    # a reject Update trained on could return as an accepted, then held-out, task.
    seen = {structure_hash(t) for t in pool} | {h for j in history for p in j.proposals.values() if (h := _hash_of(p))}
    by_kind = kind_record(sorted(set(kinds)), journal, history)
    record = arm_record(kinds, journal, history)
    out = []
    for i in range(upto):
        p = journal.proposals.get(i)
        if p is None:
            # the run's first round follows the schedule (every kind in turn, a generator drawn at random);
            # later ones, and every round of a later cycle, draw by results
            kind, variant = (kinds[i % len(kinds)], None) if by_kind is None else \
                draw_arm(record, by_kind, config.seed, i)
            p = _fresh_procedural(kind, pool, i, config, seen, variant)
            journal.add_proposal(p)
        h = _hash_of(p)
        if h:
            seen.add(h)
        out.append(p)
    return out


def _hash_of(p: Proposal) -> str | None:
    try:
        return structure_hash(parse_candidate(p.data))
    except Rejection:
        return None


def _fresh_procedural(kind: str, pool: Sequence[Task], index: int, config: DiscoveryConfig, seen: set[str],
                      variant: str | None) -> Proposal:
    """A procedural proposal, redrawn a few times when it repeats one already made (budget is not spent twice)."""
    p = procedural.propose(kind, pool, index, config.seed, config.families, variant=variant)
    for attempt in range(1, 8):
        if _hash_of(p) not in seen:
            break
        p = procedural.propose(kind, pool, index, config.seed, config.families, attempt=attempt, variant=variant)
    return p


def screen(config: DiscoveryConfig, proposals: Sequence[Proposal], archive_tasks: Sequence[Task],
           sealed_sources: Sequence[Path] = ()) -> dict[int, Task | Rejection]:
    """Cheap checks and novelty, in index order (a candidate is compared with the earlier ones)."""
    index = NoveltyIndex(archive_tasks, eval_prompts([*archive.eval_sources(config), *sealed_sources]))
    out: dict[int, Task | Rejection] = {}
    for p in proposals:
        try:
            if p.data is None:
                raise Rejection("malformed", "no JSON object in the proposer's answer")
            task = parse_candidate(p.data)
            check(task, config)
            dup = index.duplicate_of(task, config.near_duplicate)
            if dup is not None:
                raise Rejection("duplicate", f"{'same as' if dup[1] >= 1 else 'near'} {dup[0]} "
                                             f"(similarity {dup[1]:.2f})")
            contaminated = index.contamination(task, config.contamination)
            if contaminated is not None:
                raise Rejection("contaminated", f"prompt overlaps an evaluation prompt ({contaminated:.2f})")
            index.add(task)
            out[p.index] = task
        except Rejection as r:
            out[p.index] = r
    return out


def rejected(p: Proposal, r: Rejection, task: Task | None = None, **extra) -> Decision:
    return Decision(index=p.index, proposer=p.proposer, parents=p.parents, accepted=False, reason=r.reason,
                    detail=r.detail[:1000], task_id=task.id if task else None,
                    family=task.family if task else None,
                    task=task.model_dump(mode="json") if task else None, **extra)


def judge(config: DiscoveryConfig, services: DiscoveryServices, p: Proposal, task: Task,
          pool_by_id: dict[str, Task]) -> Decision:
    """Verify in the sandbox, then measure the solve rate. Raises ``InfraError`` (retry, not a reason)."""
    start = time.monotonic()
    parent = parent_of(p, pool_by_id)
    try:
        log = verify(task, services.verifier, parent=parent, extra_decoys=p.decoys, runs=config.reference_runs)
    except Rejection as r:
        return rejected(p, r, task, seconds=round(time.monotonic() - start, 3))
    base = {"index": p.index, "proposer": p.proposer, "parents": p.parents, "task_id": task.id, "family": task.family,
                "task": task.model_dump(mode="json")}
    if not config.measure_difficulty or services.solver is None:
        return Decision(**base, accepted=True, log=tuple(log), seconds=round(time.monotonic() - start, 3))
    d = measure(lambda first, n: services.solver.attempts(task, first, n), tuple(config.band),
                config.confidence, config.min_samples, config.max_samples)
    if d.decision == "no_attempts":
        raise InfraError(f"the solver hit {d.infra_errors} infrastructure errors on {task.id}")
    log.append(f"solver: {d.passes}/{d.attempts} passed ({d.infra_errors} infra errors not counted); "
               f"Wilson {config.confidence:.0%} interval [{d.low:.2f}, {d.high:.2f}] vs band {tuple(config.band)}")
    accepted = d.decision == "in_band"
    return Decision(**base, accepted=accepted, reason=None if accepted else d.decision,
                    detail="" if accepted else log[-1], passes=d.passes, attempts=d.attempts,
                    infra_errors=d.infra_errors, solve_rate=round(d.rate, 4), interval=(round(d.low, 4),
                                                                                          round(d.high, 4)),
                    learnability=round(d.learnability, 4), log=tuple(log), seconds=round(time.monotonic() - start, 3))


def parent_of(p: Proposal, pool_by_id: dict[str, Task]) -> Task | None:
    """The pool task a harder-than-parent proposal must beat (None for the others)."""
    return pool_by_id.get(p.parents[0]) if p.harder_than_parent and p.parents else None


def judge_candidate(config: DiscoveryConfig, services: DiscoveryServices, c: Candidate) -> Decision | None:
    """``judge_with_retries`` of one ``Candidate`` on ``services``."""
    pool_by_id = {c.parent.id: c.parent} if c.parent is not None else {}
    return judge_with_retries(config, services, c.proposal, c.task, pool_by_id)


def judge_with_retries(config: DiscoveryConfig, services: DiscoveryServices, p: Proposal, task: Task,
                       pool_by_id: dict[str, Task]) -> Decision | None:
    """``judge`` retried on infrastructure errors; None when they persist (left for a rerun)."""
    for attempt in range(services.infra_retries + 1):
        try:
            return judge(config, services, p, task, pool_by_id)
        except InfraError as exc:
            services.log(f"candidate {p.index}: infrastructure error (try {attempt + 1}): {exc}")
    return None


def prepare(config: DiscoveryConfig, services: DiscoveryServices, upto: int | None = None,
            journal: Journal | None = None) -> tuple[Journal, list[tuple[Proposal, Task]], dict[str, Task]]:
    """Plan and screen candidates ``[0, upto)``; journal screen rejections; return what still needs judging."""
    journal = journal or open_journal(config)
    pool = archive.task_pool(config)
    if services.sealed is not None:
        services.sealed.refuse(pool, "Discovery's seed and archive tasks")
    proposals = plan(config, services, pool, journal, upto)
    screened = screen(config, proposals, [*pool, *archive.archived_tasks(config.run_dir)], services.sealed_sources)
    pending = []
    for p in proposals:
        outcome = screened[p.index]
        if isinstance(outcome, Rejection):
            task = None
            if p.data is not None:
                try:
                    task = parse_candidate(p.data)
                except Rejection:
                    pass
            journal.add_decision(rejected(p, outcome, task))
        elif p.index not in journal.decisions:
            pending.append((p, outcome))
    return journal, pending, {t.id: t for t in pool}


def run_discovery(config: DiscoveryConfig, services: DiscoveryServices) -> DiscoveryResult:
    start = time.monotonic()
    journal = open_journal(config)
    left = config.budget - sum(1 for i in journal.decisions if i < config.budget)
    services.log(f"discovery cycle {config.cycle}: {config.budget} candidates, {left} to judge")
    infra: list[int] = []

    def report() -> None:  # in this thread only: the mapper hands each decision back here
        if services.progress is not None:
            services.progress(sum(1 for i in journal.decisions if i < config.budget), config.budget)

    def record(c: Candidate, d: Decision | None) -> None:
        p, task = c.proposal, c.task
        if d is None:
            infra.append(p.index)
            return
        journal.add_decision(d)
        report()
        services.log(f"candidate {p.index} ({p.proposer}{'' if p.level is None else f' level {p.level}'}, "
                     f"{task.family}): {'accepted' if d.accepted else d.reason} {d.detail[:120]}")

    judge_one = services.judge or functools.partial(judge_candidate, config, services)
    if services.mapper.portable and services.judge is None:
        raise MindForgeError("a mapper that leaves the process needs a portable services.judge "
                             "(discovery.runtime.open_services sets one)")
    for upto in round_ends(config):
        _, pending, pool_by_id = prepare(config, services, upto, journal)
        report()
        candidates = [Candidate(proposal=p, task=t, parent=parent_of(p, pool_by_id)) for p, t in pending]
        for i, d in services.mapper(judge_one, candidates):
            record(candidates[i], d)
    return finish(config, journal, time.monotonic() - start, services.hcp_version, infra_pending=len(infra))
