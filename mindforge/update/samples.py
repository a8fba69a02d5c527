"""Training samples from rollouts: the engine's token ids, a loss mask, the old logprobs.

A sample is one token sequence the trainer forwards. It is built from the
``Hop`` records alone, never from decoded text, so the trainer sees exactly
the ids the engine saw and sampled:

- a hop contributes ``prompt_ids + completion_ids``; only its completion
  positions carry loss (the prompt, including earlier tool results, is
  context);
- each adapter learns from its own tokens: answer hops train the answering
  route's adapter; route hops train L0 only when router training is on, with
  the reward "the chosen route is the task's family";
- hops of one trajectory chain when a later hop's prompt starts with the
  earlier sequence (an answer, a tool result, the next answer): they become
  one sample whose mask covers both completions, and the ids in between
  (the rendered tool result) stay masked. If the ids do not chain exactly,
  the hops stay separate samples: nothing is re-rendered to make them fit.

The engine's logprob of each completion token is the "old policy" logprob of
the importance ratio; the temperature and nucleus it was sampled with travel
with the sample so the trainer scores tokens under the same distribution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mindforge.errors import MindForgeError
from mindforge.tasks.models import Hop, Trajectory


class SampleError(MindForgeError):
    pass


@dataclass(frozen=True)
class Sampling:
    """The distribution a hop's tokens were drawn from (temperature 0: the engine reports T=1)."""

    temperature: float = 1.0
    top_p: float = 1.0

    @property
    def scoring_temperature(self) -> float:
        return self.temperature if self.temperature > 0 else 1.0

    @property
    def scoring_top_p(self) -> float:
        return self.top_p if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class Sample:
    """One sequence to forward: ``mask[t]`` says token ``t`` is a trained completion token."""

    group: int  # index of the task's group in the step
    trajectory_id: str
    kind: str  # "answer" or "route"
    route: str
    ids: tuple[int, ...]
    mask: tuple[bool, ...]
    old_logprobs: tuple[float, ...]  # the engine's logprob at masked positions, 0.0 elsewhere
    advantage: float
    temperature: float
    top_p: float

    @property
    def active(self) -> int:
        return sum(self.mask)

    @property
    def first_loss(self) -> int:
        return self.mask.index(True)


@dataclass(frozen=True)
class SampleSpec:
    """Which hops become samples, and how their advantages are formed."""

    route: str  # the route whose adapter is trained
    train_router: bool = False
    scale_rewards: bool = True
    answer_sampling: Sampling = Sampling()
    route_sampling: Sampling = Sampling()


@dataclass(frozen=True)
class StepSamples:
    samples: list[Sample]
    groups: int  # groups given
    skipped_groups: int  # groups without signal (equal rewards) or without trained hops


def advantages(rewards: Sequence[float], scale: bool) -> list[float] | None:
    """Group-relative advantages, or None when the group has no signal (all rewards equal).

    Mean-centred; with ``scale`` divided by the group's (unbiased) standard
    deviation plus 1e-4, as TRL does.
    """
    n = len(rewards)
    if n < 2 or max(rewards) - min(rewards) < 1e-12:
        return None
    mean = sum(rewards) / n
    centred = [r - mean for r in rewards]
    if not scale:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1))
    return [c / (std + 1e-4) for c in centred]


def build_samples(
    groups: Sequence[Sequence[Trajectory]], spec: SampleSpec, families: Mapping[str, str] | None = None,
) -> StepSamples:
    """Samples of every group with signal; ``families``: task id -> family (router training)."""
    out: list[Sample] = []
    skipped = 0
    for gi, group in enumerate(groups):
        scored = [t for t in group if t.reward is not None and t.hops]
        made = _answer_samples(gi, scored, spec)
        if spec.train_router and spec.route == "L0":
            made += _route_samples(gi, scored, spec, families or {})
        if made:
            out += made
        else:
            skipped += 1
    return StepSamples(samples=out, groups=len(groups), skipped_groups=skipped)


def _answer_samples(gi: int, group: Sequence[Trajectory], spec: SampleSpec) -> list[Sample]:
    adv = advantages([float(t.reward) for t in group], spec.scale_rewards)  # type: ignore[arg-type]
    if adv is None:
        return []
    out: list[Sample] = []
    for traj, a in zip(group, adv, strict=True):
        hops = [h for h in traj.hops if h.kind == "answer" and h.route == spec.route]
        for ids, mask, old in chain_hops(hops):
            out.append(Sample(gi, traj.id, "answer", spec.route, ids, mask, old, a,
                              spec.answer_sampling.scoring_temperature, spec.answer_sampling.scoring_top_p))
    return out


def _route_samples(gi: int, group: Sequence[Trajectory], spec: SampleSpec,
                   families: Mapping[str, str]) -> list[Sample]:
    usable = [t for t in group if t.task_id in families and any(h.kind == "route" for h in t.hops)]
    rewards = [1.0 if t.route == families[t.task_id] else 0.0 for t in usable]
    adv = advantages(rewards, spec.scale_rewards)
    if adv is None:
        return []
    out: list[Sample] = []
    for traj, a in zip(usable, adv, strict=True):
        hops = [h for h in traj.hops if h.kind == "route"]
        for ids, mask, old in chain_hops(hops):
            out.append(Sample(gi, traj.id, "route", "L0", ids, mask, old, a,
                              spec.route_sampling.scoring_temperature, spec.route_sampling.scoring_top_p))
    return out


Chained = tuple[tuple[int, ...], tuple[bool, ...], tuple[float, ...]]


def chain_hops(hops: Sequence[Hop]) -> list[Chained]:
    """(ids, mask, old logprobs) per sequence; a hop whose prompt extends the last sequence joins it."""
    out: list[tuple[list[int], list[bool], list[float]]] = []
    for hop in hops:
        _check_hop(hop)
        if not hop.completion_ids:
            continue
        prompt = list(hop.prompt_ids)
        last = out[-1] if out else None
        if last is not None and len(prompt) >= len(last[0]) and prompt[: len(last[0])] == last[0]:
            extra = len(prompt) - len(last[0])  # ids the harness added: tool results, next turn header
            last[0].extend(prompt[len(last[0]):] + list(hop.completion_ids))
            last[1].extend([False] * extra + [True] * len(hop.completion_ids))
            last[2].extend([0.0] * extra + list(hop.logprobs))
        else:
            out.append((prompt + list(hop.completion_ids),
                        [False] * len(prompt) + [True] * len(hop.completion_ids),
                        [0.0] * len(prompt) + list(hop.logprobs)))
    return [(tuple(i), tuple(m), tuple(o)) for i, m, o in out]


def _check_hop(hop: Hop) -> None:
    if not hop.prompt_ids:
        raise SampleError(f"a {hop.kind} hop of {hop.adapter} has no prompt ids: nothing to condition on")
    if len(hop.logprobs) != len(hop.completion_ids):
        raise SampleError(f"a {hop.kind} hop of {hop.adapter} has {len(hop.completion_ids)} completion ids "
                          f"but {len(hop.logprobs)} logprobs; the engine reports one logprob a token")
    bad = [x for x in hop.logprobs if not math.isfinite(x)]
    if bad:
        raise SampleError(f"a {hop.kind} hop of {hop.adapter} has a non-finite logprob ({bad[0]}): "
                          "was it sampled outside the nucleus the trainer was told about?")


def kept_samples(trajectories: Sequence[Trajectory], route: str, weight: float = 1.0,
                 group: int = 0) -> list[Sample]:
    """Supervised samples of verified trajectories: the ``route``'s answer hops, chained as for GRPO.

    The rejection-sampling phase keeps only sandbox passes; their tokens are
    trained at the model's own distribution (temperature 1, full nucleus),
    whatever they were sampled with, and ``advantage`` carries ``weight``.
    """
    out: list[Sample] = []
    for traj in trajectories:
        hops = [h for h in traj.hops if h.kind == "answer" and h.route == route]
        for ids, mask, old in chain_hops(hops):
            out.append(Sample(group, traj.id, "answer", route, ids, mask, old, weight, 1.0, 1.0))
    return out


def label_sample(prompt_ids: Sequence[int], label_ids: Sequence[int], weight: float, trajectory_id: str,
                 group: int = 0) -> Sample:
    """A route hop's prompt with the label the task's family calls for as its completion (router training)."""
    if not prompt_ids or not label_ids:
        raise SampleError(f"{trajectory_id}: a route sample needs prompt ids and label ids")
    ids = (*prompt_ids, *label_ids)
    mask = (False,) * len(prompt_ids) + (True,) * len(label_ids)
    return Sample(group, trajectory_id, "route", "L0", ids, mask, (0.0,) * len(ids), weight, 1.0, 1.0)
