"""Rejection-sampling fine-tuning: the route's adapter learns from its own verified answers.

With a base pass rate of a few percent most GRPO groups are all-fail and
teach nothing; every pass, though, is a correct program the model wrote
(STaR, ReST-EM, RAFT). The phase:

1. ``attempts`` rollouts of each training task through the production
   harness on the served adapter (the same rendering, route pin and engine
   token ids as GRPO's rollouts), at ``temperature`` for diversity; the
   archive's learnable tasks the adapter has not mastered go first
   (``mastery_rank``, by the earlier cycles' attempts), so that a cycle
   spends its attempts where a pass is still news;
2. the sandbox verdict keeps the passes (a whole pass, not a partial
   reward); identical answers of one task count once, and at most
   ``max_per_task`` are kept so that easy tasks do not dominate;
3. ``epochs`` passes of maximum likelihood on the kept answers' completion
   tokens (the same masks as GRPO: prompts and tool results carry no loss).

It also tells GRPO where its signal is: tasks whose attempts both passed and
failed (a spread) are the ones a group-relative advantage can learn from.

Discovery has already made such attempts: measuring a candidate's solve rate
runs 4 to 12 of them through the same production harness on the adapter in
force, and the sandbox judged each. With ``reuse_discovery`` the passes of
this cycle's Discovery on the training tasks join the phase's own (same
dedup, same cap a task); only the route's answer hops train, so attempts the
router sent elsewhere (before router training, L2 tasks went to L0) add
nothing. Held-out validation tasks are never among them.

With ``discovery_rejects`` the passes on candidates Discovery verified and
measured but did not keep, because the model solved them too often (or
too rarely, or its interval stayed across the band), join as well: the
sandbox ran the reference twice and the decoys failed, so a passing answer
is a correct program all the same (ReST-EM trains on every verified success,
easy ones included). Measured on the last efficacy run: 4 to 7 such
candidates a cycle, with 4 passes each, were thrown away while the phase's
own 64 attempts kept 4 to 7 answers. The cap a task keeps them from
dominating.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mindforge.tasks.models import Task, Trajectory, VerdictStatus
from mindforge.update.samples import Sample, kept_samples


class RejectionSampling(BaseModel):
    """The rejection-sampling phase of Update (``UpdateConfig.rft``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    attempts: int = Field(default=4, ge=1)  # K rollouts a task
    temperature: float = Field(default=0.8, ge=0.0)  # answer sampling of the attempts
    max_tasks: int | None = Field(default=48, ge=1)  # tasks attempted a cycle (a window over the pool)
    max_per_task: int = Field(default=2, ge=1)  # distinct passing answers kept a task
    epochs: int = Field(default=2, ge=1)
    batch_size: int = Field(default=8, ge=1)  # samples an optimizer step
    # Measured (benchmarks/rft_lr_sweep.py on the efficacy run's verified answers, 4 steps): held-out NLL
    # 0.438 -> 0.434 / 0.424 / 0.406 / 0.432 / 0.513 at 3e-5 / 1e-4 / 3e-4 / 1e-3 / 3e-3.
    lr: float = Field(default=3e-4, gt=0)
    reuse_discovery: bool = True  # Discovery's verified solve-rate attempts on the training tasks join the passes
    # ... and on the candidates it verified but rejected for their difficulty (too easy, too hard, undecided)
    discovery_rejects: bool = True


class RFTReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    tasks: int
    attempts: int
    passes: int
    pass_rate: float  # over all attempts: the training reward of this phase
    tasks_with_pass: int
    kept: int  # distinct passing answers trained on
    spread_tasks: tuple[str, ...]  # some attempts passed, some failed: GRPO's signal
    steps: int
    losses: tuple[float, ...]
    seconds: float
    reason: str = ""
    discovery_passes: int = 0  # passing Discovery attempts that joined the phase's own
    reject_passes: int = 0  # of those, on candidates Discovery verified but rejected for their difficulty
    by_mastery: dict[str, int] = Field(default_factory=dict)  # learnable tasks attempted, by ``mastery_rank``


def attempted(train: Sequence[Task], max_tasks: int | None, cycle: int,
              history: dict[str, tuple[int, int]] | None = None) -> list[Task]:
    """The tasks attempted this cycle: the learnable ones (Discovery measured the model solving it
    sometimes; ``inputs.learnable``), those the adapter has not yet mastered first (``mastery_rank`` on
    ``history``, the earlier cycles' attempts), then a window over the others that moves each cycle, up to
    ``max_tasks``."""
    from mindforge.update.inputs import learnable

    cap = max_tasks or len(train)
    seen = history or {}
    good = sorted((t for t in train if learnable(t)), key=lambda t: mastery_rank(seen.get(t.id)))[:cap]
    rest = [t for t in train if not learnable(t)]
    room = min(cap - len(good), len(rest))
    start = (max(cycle - 1, 0) * room) if room else 0
    return good + [rest[(start + i) % len(rest)] for i in range(room)]


MASTERY = ("new", "spread", "failed", "mastered")  # mastery_rank's order, for the stage's log


def mastery_rank(record: tuple[int, int] | None) -> int:
    """Where a learnable task goes in the attempt order, by its last attempts (passes, attempts): one never
    attempted first (this cycle's Discovery measured it on the adapter in force), then one whose attempts
    disagreed (a pass to keep and GRPO's signal), then one never passed, and last one passed every time:
    an answer the adapter already gives teaches it little, while the archive's oldest tasks would otherwise
    fill the window every cycle (measured: 56 of 64 attempts passed at the last efficacy run's cycle 3)."""
    if record is None:
        return 0
    passes, attempts = record
    return 1 if 0 < passes < attempts else 2 if passes == 0 else 3


def attempt_history(update_dirs: Iterable[Path]) -> dict[str, tuple[int, int]]:
    """Task id -> (passes, attempts) of its rejection-sampling attempts in the latest of ``update_dirs``
    (earlier cycles' Update folders, oldest first) that attempted it; an infrastructure error
    (``rollouts.dropped_reason``) counts for nothing, so a task with only those is absent."""
    from mindforge.rollouts import dropped_reason
    from mindforge.store import read_parquet

    found: dict[str, tuple[int, int]] = {}
    for folder in update_dirs:
        shard = Path(folder) / "trajectories" / "rft-attempts.parquet"
        if not shard.exists():
            continue
        mine: dict[str, tuple[int, int]] = {}
        for t in read_parquet(shard, Trajectory):
            if dropped_reason(t) is not None:
                continue
            p, n = mine.get(t.task_id, (0, 0))
            mine[t.task_id] = (p + passed(t), n + 1)
        found.update(mine)
    return found


def passed(t: Trajectory) -> bool:
    return t.verdict is not None and t.verdict.status == VerdictStatus.PASS


def keep(groups: Sequence[Sequence[Trajectory]], max_per_task: int) -> list[list[Trajectory]]:
    """Each task's distinct passing attempts, at most ``max_per_task`` (in sample order)."""
    out = []
    for group in groups:
        seen: set[str] = set()
        mine: list[Trajectory] = []
        for t in group:
            key = " ".join(t.answer.split())
            if passed(t) and key not in seen and len(mine) < max_per_task:
                seen.add(key)
                mine.append(t)
        out.append(mine)
    return out


def discovery_passes(folder: Path, task_ids: Iterable[str] | None, route: str) -> dict[str, list[Trajectory]]:
    """Task id -> the passing attempts Discovery stored in ``folder`` (its ``trajectories``) for ``task_ids``
    (None: every task) that ``route`` answered (the router may have sent a task elsewhere)."""
    from mindforge.store import read_parquet

    wanted = None if task_ids is None else set(task_ids)
    found: dict[str, list[Trajectory]] = {}
    for shard in sorted(Path(folder).glob("*.parquet")) if Path(folder).is_dir() else ():
        for t in read_parquet(shard, Trajectory):
            if (wanted is None or t.task_id in wanted) and passed(t) and any(h.kind == "answer" and h.route == route for h in t.hops):
                found.setdefault(t.task_id, []).append(t)
    return found


MEASURED_REJECTIONS = ("too_easy", "too_hard", "undecided")  # verified in the sandbox, then the solve rate decided


def verified_rejects(folder: Path) -> list[Task]:
    """The candidates in a Discovery stage ``folder`` that passed sandbox verification and were rejected only
    for their measured solve rate (``rejected.parquet``)."""
    from mindforge.store import read_parquet
    from mindforge.tasks.decisions import Decision

    path = Path(folder) / "rejected.parquet"
    if not path.exists():
        return []
    return [Task.model_validate(d.task) for d in read_parquet(path, Decision)
            if d.reason in MEASURED_REJECTIONS and d.task is not None and d.attempts]


def with_discovery(groups: Sequence[Sequence[Trajectory]],
                   found: dict[str, list[Trajectory]]) -> list[list[Trajectory]]:
    """The phase's groups, each followed by Discovery's passes of its task; then the tasks only Discovery tried."""
    out = [[*g, *found.get(g[0].task_id, [])] if g else list(g) for g in groups]
    attempted = {g[0].task_id for g in groups if g}
    out += [found[tid] for tid in sorted(found) if tid not in attempted]
    return out


def spread(groups: Sequence[Sequence[Trajectory]]) -> tuple[str, ...]:
    return tuple(g[0].task_id for g in groups
                 if g and any(passed(t) for t in g) and not all(passed(t) for t in g))


def samples_of(kept: Sequence[Sequence[Trajectory]], route: str) -> list[Sample]:
    """Supervised samples; one group a task, so a task's answers share its prompt's forward."""
    return [s for gi, ts in enumerate(kept) for s in kept_samples(ts, route, group=gi)]

