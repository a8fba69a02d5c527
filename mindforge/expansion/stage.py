"""The Expansion stage as one library call: ``run_expansion(config, services)``.

Solve, audit, propose, evaluate, accept and stop are separate pieces
(``Evaluator``, ``audit``, proposers, ``PatchPolicy``, ``PairedGainRule``,
``check_stop``, all driven by ``Search``); this module wires them to a run
directory and produces the ``ExpansionResult`` a flow publishes.

Resuming: the stage folder holds ``inputs.json`` (start HCP, task splits,
sampling), the journal and the trajectory shards. A rerun with the same
inputs replays the journal and continues; a rerun with different inputs is
refused rather than mixing two searches. A finished stage (``DONE.json``)
returns its stored result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mindforge.errors import InputError
from mindforge.expansion.audit import AuditReport, audit
from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.evaluate import Evaluator, Solver
from mindforge.expansion.inputs import cycle_tasks, start_hcp_path
from mindforge.expansion.journal import Journal
from mindforge.expansion.operators import NumericProposer, StructuralProposer
from mindforge.expansion.outputs import (
    report,
    trajectory_rows,
    write_audit,
    write_diff,
    write_hcp,
    write_lineage,
)
from mindforge.expansion.proposers import Proposer, RoundRobin
from mindforge.expansion.records import ExpansionResult, SolveRecord
from mindforge.expansion.reflect import ReflectiveProposer, Reflector
from mindforge.expansion.search import Search
from mindforge.expansion.splits import SPLITS, Splits, split_tasks
from mindforge.expansion.stop import Stop
from mindforge.hcp import HCP, hcp_hash, load_hcp
from mindforge.store import RunDir, atomic_write_json
from mindforge.tasks.benchmarks import SealedSet
from mindforge.tasks.models import Trajectory


@dataclass
class ExpansionServices:
    """The live parts: ``solver`` runs harness + engine + sandbox (see ``expansion.solve``)."""

    solver: Solver
    reflector: Reflector | None = None
    proposers: Sequence[Proposer] | None = None  # None: built from config.proposers
    log: Callable[[str], None] = field(default=lambda message: None)
    progress: Callable[[int, int], None] | None = None  # (candidates evaluated, budget), for a progress bar
    clock: Callable[[], float] = time.monotonic
    sealed: SealedSet | None = None  # sealed benchmarks: never among the tasks Expansion selects on


def build_proposers(config: ExpansionConfig, reflector: Reflector | None) -> list[Proposer]:
    out: list[Proposer] = []
    for name in config.proposers:
        if name == "reflect" and reflector is not None:
            out.append(ReflectiveProposer(reflector, config.reflect_examples))
        elif name == "numeric":
            out.append(NumericProposer())
        elif name == "structural":
            out.append(StructuralProposer())
    if not out:
        raise InputError("expansion config", "/proposers", "no usable proposer (reflect needs a reflector)")
    return out


def _check_inputs(folder: Path, inputs: dict) -> None:
    import json

    path = folder / "inputs.json"
    if path.exists():
        before = json.loads(path.read_text())
        if before != inputs:
            changed = sorted(k for k in inputs if before.get(k) != inputs[k])
            raise InputError(str(path), "", f"this stage folder holds a search with other inputs "
                                            f"({', '.join(changed)}); use another run dir or cycle")
        return
    atomic_write_json(path, inputs)


class _Stage:
    def __init__(self, config: ExpansionConfig, services: ExpansionServices):
        self.config, self.services = config, services
        self.run_dir = RunDir(config.run_dir)
        self.folder = self.run_dir.stage(config.cycle, "expansion")
        self.t0 = services.clock()

    def prepare(self) -> tuple[HCP, Splits]:
        start = load_hcp(start_hcp_path(self.config))
        tasks, source = cycle_tasks(self.config)
        if self.services.sealed is not None:
            self.services.sealed.refuse(tasks, f"Expansion's tasks ({source})")
        splits = split_tasks(tasks, self.config.train_fraction, self.config.test_fraction)
        _check_inputs(self.folder, {
            "start_hcp": hcp_hash(start), "tasks_source": source, "splits": splits.ids(),
            "samples": self.config.samples, "seed": self.config.seed,
        })
        write_hcp(self.folder / "hcp", start)
        sizes = ", ".join(f"{n} {len(getattr(splits, n))}" for n in SPLITS)
        self.services.log(f"start {hcp_hash(start)}; {len(tasks)} tasks from {source} ({sizes})")
        return start, splits

    def run(self) -> ExpansionResult:
        start, splits = self.prepare()
        evaluator = Evaluator(self.services.solver, self.folder / "trajectories", self.config.samples)
        journal = Journal(self.folder / "journal.jsonl")
        proposers = self.services.proposers or build_proposers(self.config, self.services.reflector)
        search = Search(self.config, splits, start, evaluator, journal, RoundRobin(proposers),
                        self.folder / "hcp", clock=self.services.clock, on_candidate=self.services.progress)
        stop = search.run()
        self.services.log(f"stopped: {stop.reason}")
        return self.finish(search, stop)

    def finish(self, search: Search, stop: Stop) -> ExpansionResult:
        start, best, ev, cfg = search.start, search.incumbent, search.evaluator, self.config
        test = list(search.splits.test)
        start_test = ev.scores(start, test, "test", cfg.seed)
        best_test = ev.scores(best, test, "test", cfg.seed)
        versions = {hcp_hash(start), hcp_hash(best)}
        for version in versions:
            if not any(s.hcp_hash == version and s.tag == "test" for s in search.journal.solves()):
                search.journal.append("solve", SolveRecord(hcp_hash=version, tag="test", rollouts=len(test) * cfg.samples))
        best_path = write_hcp(self.folder / "hcp", best)
        diff = write_diff(self.folder, start, best)
        records = search.journal.candidates()
        write_lineage(self.folder, records)
        labelled = self._labelled(search, start, best)
        reports = self._audits(search, labelled, start, best)
        families = {t.id: t.family for n in SPLITS for t in getattr(search.splits, n)}
        p = search.progress
        return ExpansionResult(
            cycle=cfg.cycle, start_hcp=hcp_hash(start), best_hcp=hcp_hash(best),
            start_hcp_path=str(self.folder / "hcp" / f"{hcp_hash(start)}.hcp.json"), best_hcp_path=str(best_path),
            stop_reason=stop.reason, stop_kind=stop.kind, proposals=p.proposals, candidates=p.evaluated,
            accepted=p.accepted, refused=sum(r.outcome == "refused" for r in records),
            rollouts=sum(e.get("rollouts", 0) for e in search.journal.entries), noise_floor=search.noise,
            validation=report(search.validation_scores(best), search.validation_scores(start)),
            test=report(best_test, start_test), diff_markdown=diff.markdown(), changed_paths=list(diff.paths),
            candidate_rows=[r.row() for r in records],
            trajectory_rows=trajectory_rows(labelled, reports, families),
            audit_rows=write_audit(self.folder, reports),
            files={name: str(self.folder / name) for name in
                   ("journal.jsonl", "lineage.json", "lineage.parquet", "audit.json", "diff.md", "trajectories")},
            elapsed_s=round(self.services.clock() - self.t0, 3),
        )

    def _labelled(self, search: Search, start: HCP, best: HCP) -> list[tuple[str, str, Trajectory]]:
        """Start's and best's trajectories on validation and test (read from the cached shards)."""
        out: list[tuple[str, str, Trajectory]] = []
        labels = [("start", start)] + ([("best", best)] if hcp_hash(best) != hcp_hash(start) else [])
        m, seed = self.config.minibatch, self.config.seed
        val = list(search.splits.validation)
        for label, hcp in labels:
            for split, tasks, tag in (("validation", val[:m], "val-mb"), ("validation", val[m:], "val-rest"),
                                      ("test", list(search.splits.test), "test")):
                out += [(label, split, tr) for tr in search.evaluator.trajectories(hcp, tasks, tag, seed)]
        return out

    def _audits(self, search: Search, labelled: list[tuple[str, str, Trajectory]], start: HCP,
                best: HCP) -> dict[str, AuditReport]:
        tasks = [t for n in SPLITS for t in getattr(search.splits, n)]
        out = {}
        same = hcp_hash(best) == hcp_hash(start)
        for label, hcp in (("start", start), ("best", best)):
            trajs = [tr for lab, _, tr in labelled if lab == label or (label == "best" and same)]
            out[label] = audit(tasks, trajs, hcp_hash(hcp))
        return out


def finished_result(config: ExpansionConfig) -> ExpansionResult | None:
    """The stored result when this cycle's Expansion already finished, else None."""
    run = RunDir(config.run_dir)
    if run.is_done(config.cycle, "expansion"):
        return ExpansionResult.model_validate_json(run.done_marker(config.cycle, "expansion").read_text())
    return None


def run_expansion(config: ExpansionConfig, services: ExpansionServices) -> ExpansionResult:
    """Run (or resume, or return the finished result of) the Expansion stage of one cycle."""
    if (done := finished_result(config)) is not None:
        return done
    run = RunDir(config.run_dir)
    result = _Stage(config, services).run()
    run.mark_done(config.cycle, "expansion", result.model_dump(mode="json"))
    return result
