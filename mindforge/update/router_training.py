"""Router training: L0's route tokens learn to pick the task's family.

The route hop is L0 answering the HCP's route prompt after ``model_id=``;
its action space is the four labels, and the reward of a label is 1 when it
names the task's family. With so small and known an action space, sampling
and keeping the rewarded labels (rejection sampling) converges to the same
target as enumerating them: the rewarded label of each task, trained by
maximum likelihood on the exact ids the engine would see (the route prompt as
the harness renders it, then the label and the hop's stop). That is what this
phase does, on the seed and discovered tasks of every family (never a sealed
benchmark's), each family weighted equally whatever its count.

It runs only when routing accuracy (the mean over families of the share of
held-out tasks routed to their family, greedy, through the engine and the
production harness) is below ``threshold``; routing accuracy per family is
reported before and after either way. The trained L0 adapter becomes a catalog
version and goes through the same hand-off as any adapter: loaded under its
versioned name, parity-probed on route prompts, validated on held-out routing
accuracy (paired with before), then promoted in a new HCP version or rolled
back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mindforge.rollouts import RewardStats
from mindforge.store import RunDir
from mindforge.tasks.models import Task
from mindforge.update.samples import Sample, label_sample

FAMILIES = ("L0", "L1", "L2", "L3")


class RouterTraining(BaseModel):
    """When and how L0's route hop is trained (``UpdateConfig.router``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    # Mean over families of the share routed to the family; below it, train.
    threshold: float = Field(default=0.9, ge=0.0, le=1.0)
    validation_per_family: int = Field(default=6, ge=1)  # held out by hashed id, never trained
    train_per_family: int = Field(default=40, ge=1)
    epochs: int = Field(default=3, ge=1)
    batch_size: int = Field(default=16, ge=1)  # samples an optimizer step
    lr: float = Field(default=3e-4, gt=0)  # a LoRA rate for a few hundred one-token targets


class RouterReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    trained: bool
    reason: str
    before: dict[str, float]  # family -> share of its held-out tasks routed to it
    after: dict[str, float] | None = None
    accuracy_before: float
    accuracy_after: float | None = None
    promoted: bool = False
    version: str | None = None  # the L0 adapter served after the phase
    hcp_path: str | None = None  # the HCP it left, when it promoted
    train_tasks: int = 0
    validation_tasks: int = 0
    steps: int = 0
    losses: tuple[float, ...] = ()
    seconds: float = 0.0

    def scalars(self) -> dict[str, float]:
        """The cycle's routing accuracy (macro and per family) before the phase and, when it trained, after."""
        out = {"routing/accuracy_before": self.accuracy_before,
               **{f"routing/before/{f}": v for f, v in self.before.items()}}
        if self.accuracy_after is not None:
            out["routing/accuracy_after"] = self.accuracy_after
        out.update({f"routing/after/{f}": v for f, v in (self.after or {}).items()})
        return out


def stored_curve(run_dir: Path) -> dict[int, dict[str, float]]:
    """Cycle -> the routing scalars its Update measured (``cycles/N/update/router.json``)."""
    run = RunDir(run_dir)
    out = {}
    for cycle in run.cycles():
        marker = run.stage(cycle, "update") / "router.json"
        if marker.is_file():
            out[cycle] = RouterReport.model_validate_json(marker.read_text(encoding="utf-8")).scalars()
    return out


def family_split(tasks: Sequence[Task], config: RouterTraining, seed: int) -> tuple[list[Task], list[Task]]:
    """(train, held-out), per family by a hash of the id: stable across reruns and file order."""
    train: list[Task] = []
    held: list[Task] = []
    for fam in FAMILIES:
        ranked = sorted((t for t in tasks if t.family == fam),
                        key=lambda t: hashlib.sha256(f"router|{seed}|{t.id}".encode()).hexdigest())
        k = min(config.validation_per_family, max(len(ranked) - 1, 0))
        held += ranked[:k]
        train += ranked[k:k + config.train_per_family]
    return train, held


def accuracy(tasks: Sequence[Task], routes: Sequence[str]) -> tuple[dict[str, float], float, RewardStats]:
    """Per-family share routed right, its mean over the families present, and per-task rewards."""
    per_task = {t.id: float(r == t.family) for t, r in zip(tasks, routes, strict=True)}
    by_family: dict[str, list[float]] = {}
    for t in tasks:
        by_family.setdefault(t.family, []).append(per_task[t.id])
    shares = {f: round(sum(v) / len(v), 4) for f, v in sorted(by_family.items())}
    macro = sum(shares.values()) / len(shares) if shares else 0.0
    values = list(per_task.values())
    n = len(values)
    mean = sum(values) / n if n else 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    stats = RewardStats(mean=mean, se=(var / n) ** 0.5 if n else 0.0, tasks=n, samples=n, dropped=0,
                        per_task=per_task)
    return shares, macro, stats


def route_samples(tasks: Sequence[Task], render: Callable[[Task], tuple[list[int], tuple[int, ...]]]) -> list[Sample]:
    """One sample a task: its route prompt, then its family's label; each family weighs the same in total."""
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.family] = counts.get(t.family, 0) + 1
    out = []
    for t in tasks:
        weight = len(tasks) / (len(counts) * counts[t.family])
        prompt, label = render(t)
        out.append(label_sample(prompt, label, weight, f"route:{t.id}"))
    return out

