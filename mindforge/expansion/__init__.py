"""Expansion: solve the cycle's tasks through an HCP, audit the failures, edit the HCP while gains are real.

Public API::

    run_expansion(config, services) -> ExpansionResult     the whole stage (resumable)
    ExpansionConfig, ExpansionServices, ExpansionResult
    Solver (protocol), Evaluator                           solve task sets, cached as parquet shards
    audit(tasks, trajectories, hcp_version) -> AuditReport failure classes with evidence
    PatchPolicy().check(doc, ops) -> Admitted | Refusal    what may be edited, before any evaluation
    NumericProposer, StructuralProposer, ReflectiveProposer, ScriptedProposer, RoundRobin
    PairedGainRule(min_delta, k_se, route_tolerance)       the acceptance gate; noise_floor(cmp, k)
    check_stop(progress, config, noise) -> Stop | None     the stop rules
    split_tasks(tasks, train_fraction, test_fraction) -> Splits
    Search                                                 the loop, journal-replayed
"""

from mindforge.expansion.accept import AcceptanceRule, Decision, PairedGainRule, noise_floor
from mindforge.expansion.audit import FAILURE_CLASSES, AuditItem, AuditReport, audit, classify
from mindforge.expansion.config import ExpansionConfig
from mindforge.expansion.evaluate import Evaluator, Solver
from mindforge.expansion.journal import Journal
from mindforge.expansion.operators import NumericProposer, StructuralProposer
from mindforge.expansion.policy import Admitted, PatchPolicy, Refusal
from mindforge.expansion.proposers import (
    Proposal,
    ProposalContext,
    Proposer,
    RoundRobin,
    ScriptedProposer,
    TrainView,
)
from mindforge.expansion.records import CandidateRecord, ExpansionResult
from mindforge.expansion.reflect import ReflectiveProposer, Reflector, parse_reflection
from mindforge.expansion.scores import Comparison, Summary, TaskScores, compare, task_scores
from mindforge.expansion.search import Search
from mindforge.expansion.splits import Splits, split_tasks
from mindforge.expansion.stage import ExpansionServices, build_proposers, run_expansion
from mindforge.expansion.stop import Progress, Stop, check_stop

__all__ = [
    "FAILURE_CLASSES",
    "AcceptanceRule",
    "Admitted",
    "AuditItem",
    "AuditReport",
    "CandidateRecord",
    "Comparison",
    "Decision",
    "Evaluator",
    "ExpansionConfig",
    "ExpansionResult",
    "ExpansionServices",
    "Journal",
    "NumericProposer",
    "PairedGainRule",
    "PatchPolicy",
    "Progress",
    "Proposal",
    "ProposalContext",
    "Proposer",
    "ReflectiveProposer",
    "Reflector",
    "Refusal",
    "RoundRobin",
    "ScriptedProposer",
    "Search",
    "Solver",
    "Splits",
    "Stop",
    "StructuralProposer",
    "Summary",
    "TaskScores",
    "TrainView",
    "audit",
    "build_proposers",
    "check_stop",
    "classify",
    "compare",
    "noise_floor",
    "parse_reflection",
    "run_expansion",
    "split_tasks",
    "task_scores",
]
