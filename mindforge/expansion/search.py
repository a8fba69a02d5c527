"""The search: propose, refuse or evaluate, accept, stop; one journal line a proposal.

Invariants:

- The incumbent only changes by accepting a candidate, and a candidate is a
  patch of the incumbent (never a rewrite; ``PatchPolicy``).
- Nothing is solved for a proposal the policy refuses: refusals are journaled
  with zero rollouts. The incumbent's baseline (validation score, noise
  floor) is measured lazily, before the first candidate that needs it.
- Every evaluated candidate is compared with the incumbent on the same
  validation tasks and seeds (the incumbent's validation solves are cached),
  first on a minibatch, then, if not clearly worse, on the rest.
- The state (incumbent, tried patches, counters, noise floor) is a function
  of the journal: ``Search`` replays it on construction, so a killed run
  continues with the next proposal and never decides a journaled candidate
  again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mindforge.expansion.accept import AcceptanceRule, Decision, PairedGainRule, noise_floor
from mindforge.expansion.audit import audit
from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.evaluate import Evaluator
from mindforge.expansion.journal import Journal
from mindforge.expansion.policy import Admitted, PatchPolicy, Refusal
from mindforge.expansion.proposers import Proposal, ProposalContext, Proposer, TrainView
from mindforge.expansion.records import (
    BaselineRecord,
    CandidateRecord,
    ScoreRecord,
    SolveRecord,
    finite,
)
from mindforge.expansion.scores import Comparison, TaskScores, compare
from mindforge.expansion.splits import Splits
from mindforge.expansion.stop import Progress, Stop, check_stop, exhausted
from mindforge.hcp import HCP, apply_patch, hcp_hash, pretty_json
from mindforge.store import atomic_write_text

NOISE_SEED_OFFSET = 7919  # the incumbent's re-run uses other seeds than the comparisons


class Search:
    def __init__(
        self,
        config: ExpansionConfig,
        splits: Splits,
        start: HCP,
        evaluator: Evaluator,
        journal: Journal,
        proposer: Proposer,
        hcp_dir: Path,
        rule: AcceptanceRule | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_candidate: Callable[[int, int], None] | None = None,
    ):
        self.config, self.splits, self.evaluator, self.journal = config, splits, evaluator, journal
        self.proposer, self.hcp_dir, self.clock = proposer, Path(hcp_dir), clock
        self.on_candidate = on_candidate  # (candidates evaluated, budget), for a progress bar
        self.rule = rule or PairedGainRule(config.min_delta, config.k_se, config.route_tolerance)
        self.policy = PatchPolicy(config.near_duplicate_ratio)
        self.start = self.incumbent = start
        self.progress = Progress()
        self.noise = 0.0
        self._baselined: set[str] = set()
        self._train_solved: set[str] = set()
        self._train: dict[str, TrainView] = {}
        self._t0 = clock()
        self.policy.remember(hcp_hash(start))
        self.replay()

    # ------------------------------------------------------------------ state
    def replay(self) -> None:
        for entry in self.journal.entries:
            body = {k: v for k, v in entry.items() if k != "type"}
            if entry["type"] == "baseline":
                self._apply_baseline(BaselineRecord.model_validate(body))
            elif entry["type"] == "solve":
                rec = SolveRecord.model_validate(body)
                self.progress.rollouts += rec.rollouts
                self._train_solved.add(rec.hcp_hash)
            elif entry["type"] == "candidate":
                self._apply(CandidateRecord.model_validate(body))

    def _apply_baseline(self, rec: BaselineRecord) -> None:
        self.progress.rollouts += rec.rollouts
        self._baselined.add(rec.hcp_hash)
        if rec.hcp_hash == hcp_hash(self.incumbent):
            self.noise = rec.noise_floor

    def _apply(self, rec: CandidateRecord) -> None:
        p = self.progress
        p.proposals = max(p.proposals, rec.index + 1)
        if rec.outcome == "refused":
            p.duplicate_streak = p.duplicate_streak + 1 if rec.refusal in ("duplicate", "near_duplicate") else 0
            return
        p.duplicate_streak = 0
        p.evaluated += 1
        p.rollouts += rec.rollouts
        if self.on_candidate is not None:
            self.on_candidate(p.evaluated, self.config.budget)
        self.policy.remember(rec.hcp_hash or "", rec.patch)
        if rec.outcome == "accepted":
            doc = apply_patch(self.incumbent.to_document(), rec.patch, f"journal candidate {rec.index}")
            if hcp_hash(doc) != rec.hcp_hash:
                raise ValueError(f"journal candidate {rec.index}: patch gives {hcp_hash(doc)}, "
                                 f"journal says {rec.hcp_hash}")
            self.incumbent = HCP.from_document(doc)
            p.accepted += 1
            p.since_accept = 0
        else:
            p.since_accept += 1

    # ------------------------------------------------------------------ measurements
    @property
    def validation(self) -> list:
        return list(self.splits.validation)

    def validation_scores(self, hcp: HCP, seed: int | None = None, tag: str = "val") -> TaskScores:
        """Minibatch and rest solved separately (so a candidate's minibatch is reused), then merged."""
        seed = self.config.seed if seed is None else seed
        m = self.config.minibatch
        head = self.evaluator.scores(hcp, self.validation[:m], f"{tag}-mb", seed)
        return head.merged(self.evaluator.scores(hcp, self.validation[m:], f"{tag}-rest", seed))

    def ensure_baseline(self) -> None:
        """The incumbent's validation score and noise floor, measured once per incumbent."""
        version = hcp_hash(self.incumbent)
        if version in self._baselined:
            return
        if self._baselined and not self.config.remeasure_noise:
            self._baselined.add(version)
            return
        first = self.validation_scores(self.incumbent)
        rerun = self.validation_scores(self.incumbent, self.config.seed + NOISE_SEED_OFFSET, "noise")
        cmp = compare(rerun, first)
        rec = BaselineRecord(
            hcp_hash=version, validation=ScoreRecord.of(first.summary()), rerun=ScoreRecord.of(rerun.summary()),
            noise_gain=cmp.gain, noise_se=finite(cmp.se), noise_floor=noise_floor(cmp, self.config.k_se),
            rollouts=first.rollouts + rerun.rollouts,
        )
        self.journal.append("baseline", rec)
        self._apply_baseline(rec)

    def train_view(self) -> TrainView:
        """The incumbent's train trajectories and audit (what reflection may see)."""
        version = hcp_hash(self.incumbent)
        if version not in self._train:
            tasks = list(self.splits.train)
            trajs = self.evaluator.trajectories(self.incumbent, tasks, "train", self.config.seed)
            if version not in self._train_solved:
                self.journal.append("solve", SolveRecord(hcp_hash=version, tag="train", rollouts=len(trajs)))
                self.progress.rollouts += len(trajs)
                self._train_solved.add(version)
            self._train[version] = TrainView(tasks=tasks, trajectories=trajs,
                                             audit=audit(tasks, trajs, version))
        return self._train[version]

    # ------------------------------------------------------------------ one proposal
    def context(self) -> ProposalContext:
        doc = self.incumbent.to_document()
        return ProposalContext(
            index=self.progress.proposals, seed=self.config.seed, incumbent=self.incumbent,
            train=self.train_view, refused=lambda ops: isinstance(self.policy.check(doc, list(ops)), Refusal),
        )

    def evaluate(self, admitted: Admitted, proposal: Proposal, index: int) -> CandidateRecord:
        """Staged: minibatch (drop if clearly worse), then the rest of validation."""
        self.ensure_baseline()
        cand = HCP.from_document(admitted.document)
        inc = self.validation_scores(self.incumbent)
        m, seed = self.config.minibatch, self.config.seed
        head = self.evaluator.scores(cand, self.validation[:m], "val-mb", seed)
        cmp = compare(head, inc, [t.id for t in self.validation[:m]])
        rollouts = head.rollouts
        decision = self.rule.survives_minibatch(cmp, self.noise) if m < len(self.validation) else None
        if decision is None:
            rest = self.evaluator.scores(cand, self.validation[m:], "val-rest", seed)
            rollouts += rest.rollouts
            cmp = compare(head.merged(rest), inc)
            decision = self.rule.decide(cmp, self.noise)
        if decision.accepted:
            atomic_write_text(self.hcp_dir / f"{admitted.hcp_hash}.hcp.json", pretty_json(admitted.document))
        return self._record(proposal, index, admitted, decision, cmp, rollouts)

    def _record(self, proposal: Proposal, index: int, admitted: Admitted, d: Decision, cmp: Comparison,
                rollouts: int) -> CandidateRecord:
        return CandidateRecord(
            index=index, proposer=proposal.proposer, parent=hcp_hash(self.incumbent),
            hcp_hash=admitted.hcp_hash, patch=list(admitted.ops), hypothesis=proposal.hypothesis,
            outcome="accepted" if d.accepted else "rejected", stage=d.stage,
            candidate=ScoreRecord.of(cmp.candidate), incumbent=ScoreRecord.of(cmp.incumbent),
            gain=d.gain, se=finite(d.se), threshold=finite(d.threshold), noise_floor=d.noise_floor,
            per_route=d.per_route, reason=d.reason, rollouts=rollouts,
        )

    def refusal(self, proposal: Proposal, index: int, kind: str, reason: str) -> CandidateRecord:
        return CandidateRecord(
            index=index, proposer=proposal.proposer, parent=hcp_hash(self.incumbent), patch=_jsonable(proposal.ops),
            hypothesis=proposal.hypothesis, outcome="refused", refusal=kind,
            reason=reason + (f" | raw reply: {proposal.raw[:300]}" if proposal.raw and kind == "malformed" else ""),
        )

    def step(self) -> Stop | None:
        """One proposal, decided and journaled; a Stop when the search is over."""
        self.progress.elapsed_s = self.clock() - self._t0
        stop = check_stop(self.progress, self.config, self.noise)
        if stop is not None:
            return stop
        index, t0 = self.progress.proposals, self.clock()
        proposal = self.proposer.propose(self.context())
        if proposal is None:
            return exhausted(self.progress)
        if proposal.malformed is not None:
            rec = self.refusal(proposal, index, "malformed", proposal.malformed)
        else:
            verdict = self.policy.check(self.incumbent.to_document(), proposal.ops, f"proposal {index}")
            if isinstance(verdict, Refusal):
                rec = self.refusal(proposal, index, verdict.kind, verdict.reason)
            else:
                rec = self.evaluate(verdict, proposal, index)
        rec = rec.model_copy(update={"seconds": round(self.clock() - t0, 3)})
        self.journal.append("candidate", rec)
        self._apply(rec)
        return None

    def run(self) -> Stop:
        while (stop := self.step()) is None:
            pass
        return stop


def _jsonable(ops: Any) -> Any:
    import json

    try:
        json.dumps(ops)
        return ops
    except (TypeError, ValueError):
        return repr(ops)[:2000]


def candidate_rows(records: Sequence[CandidateRecord]) -> list[dict[str, Any]]:
    return [r.row() for r in records]
