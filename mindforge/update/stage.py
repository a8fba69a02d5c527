"""The Update stage: GRPO on one route's adapter through the serving harness, then handoff.

``run_update(config, services) -> UpdateResult``. The stage never starts or
stops anything itself: ``services`` (see ``mindforge.update.runtime``) hands
it a live engine, a sandbox pool, a harness builder and the trainable policy.

One run:

1. the route's tasks for the cycle are split into training and held-out
   validation tasks; the HCP's current served adapter of the route (a
   catalog version) is the parent;
2. validation before: rollouts of the held-out tasks through the harness on
   the served adapter, rewards from sandbox verdicts, mean and standard
   error over tasks;
3. ``steps`` GRPO steps; each step's rollouts are sampled from the weights
   being trained (after a step the policy is saved to a scratch folder and
   loaded into the engine under a scratch name, so the next rollouts are on
   policy and their logprobs are the ones the importance ratio needs);
4. the trained adapter becomes a new catalog version; the handoff loads it
   under its versioned name, runs the parity probe, measures validation
   after with the same seeds (paired), and promotes it in a new HCP version
   or rolls back.

Artifacts under ``RunDir(run).stage(cycle, "update")``: ``trajectories/``
(parquet: validation before/after and every training step), ``curve.json``,
``tensorboard/`` (event files, see ``tracking``), ``hcp/<hash>.hcp.json`` and
``DONE.json`` (the result). While training, ``checkpoints/step-NNNN`` (see
``checkpoints``): a rerun of a killed Update resumes at the newest one with the
same data order and seeds, so it reaches the weights an uninterrupted run
would; they are removed once ``DONE.json`` is written.
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mindforge.catalog import (
    AdapterCatalog,
    AdapterVersion,
    TrainingData,
    write_peft_adapter,
)
from mindforge.engine.admin import EngineAdmin
from mindforge.hcp import hcp_hash
from mindforge.rollouts import (
    HCP_REWARDS,
    RewardKind,
    RewardStats,
    RolloutConfig,
    SessionOpener,
    TurnRunner,
    Verifier,
    groups_for_training,
    paired_se,
    persist,
    reward_stats,
    rollout_groups,
)
from mindforge.settings import ENGINE_MAX_BATCH
from mindforge.store import RunDir, atomic_write_json
from mindforge.tasks.benchmarks import SealedSet
from mindforge.tasks.models import Route, Task, Trajectory
from mindforge.tracking import Tracker, TrackerKind, open_tracker, write_cycle_curve
from mindforge.update import rft as rejection
from mindforge.update import router_training
from mindforge.update.checkpoints import (
    Checkpoint,
    latest_checkpoint,
    remove_checkpoints,
    restore,
    save_checkpoint,
)
from mindforge.update.curve import CurveRow, curve_row
from mindforge.update.handoff import HandoffResult, Parity, ProbeConfig, hand_off
from mindforge.update.inputs import archive_tasks, cycle_tasks, learnable, split
from mindforge.update.policy import PARENT_ADAPTER, TRAIN_ADAPTER
from mindforge.update.rft import RejectionSampling, RFTReport
from mindforge.update.router_training import RouterReport, RouterTraining


class UpdateConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path
    cycle: int = Field(default=1, ge=0)
    route: Route = "L2"
    steps: int = Field(default=2, ge=0)
    group_size: int = Field(default=4, ge=2)  # G: a group needs two samples to compare
    batch_tasks: int = Field(default=2, ge=1)  # tasks a step
    # None: the HCP's guarded verifier setting. pass_fraction gives a small
    # model a denser signal: whole passes are rare, and a group whose rewards
    # are all 0 teaches nothing.
    reward: RewardKind | None = None
    max_tokens: int | None = Field(default=192, ge=1)  # answer cap in rollouts; None: the HCP's
    max_difficulty: int | None = Field(default=None, ge=1, le=3)  # seed/discovery difficulty cap
    max_train_tasks: int | None = Field(default=None, ge=1)
    grpo: dict[str, Any] = Field(default_factory=dict)  # GRPOConfig fields (loss type, lr, KL, ...)
    retention: int = Field(default=2, ge=1)  # versions of the route kept loaded in the engine
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    probe_prompts: int = Field(default=3, ge=1)
    validation_tasks: int = Field(default=4, ge=1)
    validation_samples: int = Field(default=2, ge=1)
    # Rolled back when after < before - max(regression_tolerance, regression_k_se x paired SE).
    regression_tolerance: float = Field(default=0.05, ge=0.0)
    regression_k_se: float = Field(default=2.0, ge=0.0)
    validate_after: bool = True
    # pinned: the trained route answers every rollout through the harness's ``route=`` path (the same
    # rendering, views, tools and summary; no route hop), so a specialist gets its data while the router
    # still misroutes (an untrained router sends nearly everything to its default route, and a routed
    # rollout then has no hop of the trained adapter). routed: the router decides, as in production, and
    # only hops the trained route answered are trained. L0 always rolls out routed (its route hop is
    # what the router learns).
    routing: Literal["pinned", "routed"] = "pinned"
    seed: int = 0
    # A checkpoint (adapter, optimizer, RNG, step) every this many steps and after the last, under
    # update/checkpoints/: a killed Update resumes at the newest one, to the same weights.
    checkpoint_every: int = Field(default=1, ge=1)
    # Where step scalars go: TensorBoard event files under update/tensorboard/ by default; mlflow and
    # wandb only when installed (their own env vars say where).
    tracking: tuple[TrackerKind, ...] = ("tensorboard",)
    hcp: Path | None = None  # None: the run's current HCP (see inputs.current_hcp_path)
    seeds: Path | None = None  # seed task folder used when Discovery wrote none
    # archive: the route's tasks of every cycle's Discovery so far plus the seeds (the archive grows and
    # Update samples from all of it); cycle: this cycle's Discovery output, topped up from the seeds.
    tasks: Literal["archive", "cycle"] = "archive"
    # Phases, in order: router training (L0's route tokens, when routing accuracy is below its threshold),
    # rejection sampling (fine-tuning on the route's own verified answers), then ``steps`` GRPO steps on the
    # tasks whose attempts had a spread. Each can be turned off; steps=0 runs no GRPO.
    router: RouterTraining = Field(default_factory=RouterTraining)
    rft: RejectionSampling = Field(default_factory=RejectionSampling)


class UpdateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    route: str
    version: str  # the served adapter of the route after the stage
    candidate: str  # the version trained (equal to version when promoted)
    promoted: bool
    reason: str = ""
    parity: Parity | None
    reward_before: float
    reward_after: float | None
    se: float | None  # standard error of the paired difference after - before
    se_before: float
    se_after: float | None
    validation_tasks: int
    hcp: str  # hash of the HCP in force after the stage
    hcp_path: Path | None
    curve: tuple[CurveRow, ...]
    adapter_path: Path | None
    trajectories: Path
    tasks_source: str
    tensorboard: Path | None = None  # event folder, when TensorBoard tracked the run
    unloaded: tuple[str, ...] = ()
    router: RouterReport | None = None
    rft: RFTReport | None = None

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``mindforge update --json`` prints."""
        parity = {"ok": self.parity.ok, "max_abs_diff": self.parity.max_abs_diff} if self.parity else None
        return {
            "route": self.route, "version": self.version, "parity": parity,
            "reward_before": self.reward_before, "reward_after": self.reward_after, "se": self.se,
            "hcp": self.hcp, "promoted": self.promoted, "candidate": self.candidate,
            "se_before": self.se_before, "se_after": self.se_after, "reason": self.reason,
            "routing_before": self.router.before if self.router else None,
            "routing_after": self.router.after if self.router else None,
            "rft": ({"pass_rate": self.rft.pass_rate, "kept": self.rft.kept, "spread_tasks": len(self.rft.spread_tasks)}
                    if self.rft else None),
        }


@dataclass
class UpdateServices:
    """Live parts the stage works with; ``runtime.open_services`` builds the real ones."""

    engine: EngineAdmin
    verifier: Verifier
    runner_for: Callable[..., TurnRunner]  # (HCP doc, max_tokens, route=pin or None) -> turn
    open_session: SessionOpener | None
    catalog: AdapterCatalog
    load_policy: Callable[[AdapterVersion], Any]  # see policy.load_policy
    make_trainer: Callable[[Any, dict[str, Any]], Any]  # (policy, grpo fields) -> .step(groups)
    render_probe: Callable[[dict[str, Any], str, Task], list[int]]  # (doc, route, task) -> prompt ids
    base_model: str
    hcp_doc: dict[str, Any]
    progress: Callable[[int, int, CurveRow | None], None] | None = None
    sealed: SealedSet | None = None  # sealed benchmarks: never trained on
    # Router training: (doc, tasks) -> each task's greedy route through the harness on the engine, and
    # (doc, task, label) -> (route prompt ids, label ids). None: the router phase cannot run (says so).
    routes_of: Callable[[dict[str, Any], Sequence[Task]], list[str]] | None = None
    render_route: Callable[[dict[str, Any], Task, str], tuple[list[int], tuple[int, ...]]] | None = None
    log: Callable[[str], None] = lambda message: None


def run_update(config: UpdateConfig, services: UpdateServices) -> UpdateResult:
    return _Run(config, services).run()


class _Run:
    """One Update run's state: kept in one place so each phase stays a short method."""

    def __init__(self, config: UpdateConfig, services: UpdateServices):
        self.cfg, self.svc = config, services
        self.run_dir = RunDir(config.run_dir)
        self.out = self.run_dir.stage(config.cycle, "update")
        self.doc = services.hcp_doc
        self.hcp_version = hcp_hash(self.doc)
        self.route = config.route
        self.prefix = self.doc["router"]["routes"][self.route]["adapter"]
        self.scratch = self.out / "scratch"
        self.scratch_name: str | None = None
        self.checkpoints = self.out / "checkpoints"
        self.fingerprint = ""
        self.router_hcp: Path | None = None  # the HCP router training left, when it promoted
        self.grpo_tasks: list[Task] = []
        self.rft_state: dict[str, Any] | None = None  # every checkpoint carries it: a resumed run reports and uses it
        self.reward: RewardKind = config.reward or HCP_REWARDS[self.doc["guarded"]["verifier"]["reward"]]

    # ------------------------------------------------------------------ phases
    def run(self) -> UpdateResult:
        router = self._router_phase()
        train, held, source = self._tasks()
        parent = self._parent_version()
        self.fingerprint = self._fingerprint(parent, train)
        resume = self._resume_point()
        served = self.doc["router"]["routes"][self.route]["served_adapter"]
        # A resumed run reuses the first attempt's validation before: same adapter, same seeds.
        before = RewardStats(**resume.state["before"]) if resume else self._validate(held, served, "before")
        policy = self.svc.load_policy(parent)
        tracker = open_tracker(self.cfg.tracking, self.out / "tensorboard", f"update-{self.cfg.cycle}-{self.route}",
                               params=self.cfg.model_dump(mode="json"), purge_step=resume.step if resume else None)
        try:
            trainer = self.svc.make_trainer(policy, self._grpo_fields())
            rft = self._rft_phase(policy, trainer, train, held, served, before, resume, tracker)
            self.rft_state = rft.model_dump(mode="json") if rft else None
            self.grpo_tasks = [t for t in train if t.id in set(rft.spread_tasks)] if rft and rft.spread_tasks else train
            curve = self._train(policy, trainer, before, resume, tracker, rft_trained=bool(rft and rft.steps))
            entry = self._save(policy, parent, train, curve, rft)
            result = self._hand_off(policy, entry, held, before)
            after = result[1]
            tracker.log(self.cfg.steps, {"validation/reward_before": before.mean,
                                         **({"validation/reward_after": after.mean} if after else {})})
        finally:
            tracker.close()
        self._cleanup_scratch()
        return self._finish(result, entry, before, curve, source, len(held), router, rft)

    # ------------------------------------------------------------------ router phase
    def _router_phase(self) -> RouterReport | None:
        """Train L0's route hop when routing accuracy is low (see ``router_training``); adopt its HCP."""
        import json

        cfg = self.cfg.router
        if not cfg.enabled:
            return None
        marker = self.out / "router.json"
        if marker.is_file():  # an earlier attempt of this Update finished the phase
            report = RouterReport(**json.loads(marker.read_text(encoding="utf-8")))
        else:
            report = self._route_training(cfg)
            if report.before:  # measured (and maybe trained): a rerun reuses it
                atomic_write_json(marker, report.model_dump(mode="json"))
        if report.before:
            write_cycle_curve(self.cfg.run_dir, "routing", router_training.stored_curve(self.cfg.run_dir))
        if report.promoted and report.hcp_path:
            self.doc = json.loads(Path(report.hcp_path).read_text(encoding="utf-8"))
            self.hcp_version = hcp_hash(self.doc)
            self.router_hcp = Path(report.hcp_path)
        self.svc.log(f"router: {report.reason}")
        return report

    def _route_training(self, cfg: RouterTraining) -> RouterReport:
        import gc
        import time

        from mindforge.update.handoff import teacher_forced_logprobs
        from mindforge.update.trainer import supervised_fit

        start = time.monotonic()
        if self.svc.routes_of is None or self.svc.render_route is None:
            return RouterReport(trained=False, reason="not measured: these services cannot route requests",
                                before={}, accuracy_before=0.0)
        tasks, source = archive_tasks(self.run_dir, self.cfg.cycle, router_training.FAMILIES, self.cfg.seeds)
        if self.svc.sealed is not None:
            self.svc.sealed.refuse(tasks, f"router training's tasks ({source})")
        train, held = router_training.family_split(tasks, cfg, self.cfg.seed)
        shares, macro, before = router_training.accuracy(held, self.svc.routes_of(self.doc, held))
        common = {"before": shares, "accuracy_before": round(macro, 4), "train_tasks": len(train),
                  "validation_tasks": len(held)}
        if macro >= cfg.threshold:
            return RouterReport(trained=False, reason=f"routing accuracy {macro:.2f} >= threshold {cfg.threshold}; "
                                f"not trained", seconds=round(time.monotonic() - start, 1), **common)
        self.svc.log(f"router: accuracy {macro:.2f} < {cfg.threshold} on {len(held)} held-out tasks "
                     f"({_shares_text(shares)}); training L0's route hop on {len(train)} tasks")
        parent = self._served_version("L0")
        policy = self.svc.load_policy(parent)
        trainer = self.svc.make_trainer(policy, {**self._grpo_fields(), "route": "L0", "lr": cfg.lr})
        samples = router_training.route_samples(train, lambda t: self.svc.render_route(self.doc, t, t.family))
        losses = supervised_fit(trainer, samples, epochs=cfg.epochs, batch_size=cfg.batch_size, seed=self.cfg.seed,
                                label="router", log=self.svc.log)
        prefix = self.doc["router"]["routes"]["L0"]["adapter"]
        entry = self.svc.catalog.save(
            "L0", write_peft_adapter(policy, TRAIN_ADAPTER), prefix=prefix, parent=parent.version,
            cycle=self.cfg.cycle, hcp_version=self.hcp_version, base_model=self.svc.base_model,
            training=TrainingData(task_ids=tuple(sorted(t.id for t in train)), dataset=source, steps=len(losses)),
            metrics={"router_losses": losses})
        after_box: list[tuple[dict[str, float], float]] = []

        def validate(name: str) -> RewardStats:
            got_shares, got_macro, stats = router_training.accuracy(
                held, self.svc.routes_of(_serving(self.doc, "L0", name), held))
            after_box.append((got_shares, got_macro))
            return stats

        probes = [self.svc.render_route(self.doc, t, t.family)[0] for t in held[: self.cfg.probe_prompts]]
        result = hand_off(
            engine=self.svc.engine, entry=entry, doc=self.doc, probe_prompts=probes,
            trainer=teacher_forced_logprobs(policy, TRAIN_ADAPTER), parent=teacher_forced_logprobs(policy, PARENT_ADAPTER),
            probe=self.cfg.probe, hcp_dir=self.out / "hcp", catalog=self.svc.catalog, retention=self.cfg.retention,
            validate=validate, before=before, regression_tolerance=0.0, regression_k_se=0.0, require_gain=True)
        del policy, trainer
        gc.collect()
        after, macro_after = after_box[-1] if after_box else (None, None)
        verdict = "promoted" if result.promoted else f"rolled back ({result.reason})"
        return RouterReport(
            trained=True, promoted=result.promoted, version=result.served,
            hcp_path=str(result.hcp_path) if result.hcp_path else None, after=after,
            accuracy_after=round(macro_after, 4) if macro_after is not None else None, steps=len(losses),
            losses=tuple(losses), seconds=round(time.monotonic() - start, 1),
            reason=f"routing accuracy {macro:.2f} < {cfg.threshold}: trained {entry.name} on {len(train)} tasks, "
                   f"accuracy after {macro_after if macro_after is None else round(macro_after, 2)}; {verdict}",
            **common)

    # ------------------------------------------------------------------ rejection sampling
    def _rft_phase(self, policy: Any, trainer: Any, train: Sequence[Task], held: Sequence[Task], served: str,
                   before: RewardStats, resume: Checkpoint | None, tracker: Tracker) -> RFTReport | None:
        """Attempts, keep the passes, fine-tune on them (``rft``); checkpointed as step 0 of the loop."""
        import time

        from mindforge.update.trainer import supervised_fit

        if resume is not None:
            found = resume.state.get("rft")
            return RFTReport(**found) if found else None
        cfg = self.cfg.rft
        if not cfg.enabled:
            return None
        start = time.monotonic()
        history = rejection.attempt_history(self.run_dir.stage(c, "update") for c in range(self.cfg.cycle))
        tasks = rejection.attempted(train, cfg.max_tasks, self.cfg.cycle, history)
        ranks = Counter(rejection.MASTERY[rejection.mastery_rank(history.get(t.id))] for t in tasks if learnable(t))
        self.svc.log(f"rft: {cfg.attempts} attempts on each of {len(tasks)} of {len(train)} training tasks "
                     f"({sum(ranks.values())} learnable: {', '.join(f'{ranks[m]} {m}' for m in rejection.MASTERY)} "
                     f"by their earlier attempts; temperature {cfg.temperature})")
        groups = self._rollouts(tasks, served, cfg.attempts, 2_000_000, self.cfg.max_tokens,
                                temperature=cfg.temperature)
        persist(groups, self.out / "trajectories", "rft-attempts")
        found = (rejection.discovery_passes(self.discovery / "trajectories", self._discovery_ids(train, held), self.route)
                 if cfg.reuse_discovery else {})
        kept = rejection.keep(rejection.with_discovery(groups, found), cfg.max_per_task)
        samples = rejection.samples_of(kept, self.route)
        losses: list[float] = []
        if samples:
            sft = self.svc.make_trainer(policy, {**self._grpo_fields(), "lr": cfg.lr})
            losses = supervised_fit(sft, samples, epochs=cfg.epochs, batch_size=cfg.batch_size, seed=self.cfg.seed,
                                    label="rft", log=self.svc.log)
        attempts = [t for g in groups for t in g]
        passes = sum(rejection.passed(t) for t in attempts)
        report = RFTReport(
            tasks=len(tasks), attempts=len(attempts), passes=passes, pass_rate=round(passes / max(len(attempts), 1), 4),
            tasks_with_pass=sum(any(rejection.passed(t) for t in g) for g in groups), kept=len(samples),
            spread_tasks=rejection.spread(groups), steps=len(losses), losses=tuple(losses),
            by_mastery={m: ranks[m] for m in rejection.MASTERY if ranks[m]},
            discovery_passes=sum(map(len, found.values())),
            reject_passes=sum(len(v) for k, v in found.items() if k not in {t.id for t in train}),
            seconds=round(time.monotonic() - start, 1),
            reason="" if samples else "no attempt passed: nothing to fine-tune on (reported, not skipped silently)")
        self.svc.log(f"rft: {passes}/{len(attempts)} attempts passed on {report.tasks_with_pass}/{len(tasks)} tasks, "
                     f"and {report.discovery_passes} of Discovery's on {len(found)} tasks ({report.reject_passes} on its "
                     f"verified rejects); {len(samples)} answers kept, "
                     f"{len(losses)} steps; {len(report.spread_tasks)} tasks with a spread")
        tracker.log(0, {"rft/pass_rate": report.pass_rate, "rft/kept": float(report.kept),
                        **({"rft/nll_first": losses[0], "rft/nll_last": losses[-1]} if losses else {})})
        save_checkpoint(self.checkpoints, 0, policy, trainer, {
            "fingerprint": self.fingerprint, "curve": [], "before": before.model_dump(),
            "rft": report.model_dump(mode="json")})
        return report

    @property
    def discovery(self) -> Path:
        return self.run_dir.stage(self.cfg.cycle, "discovery")

    def _discovery_ids(self, train: Sequence[Task], held: Sequence[Task]) -> set[str]:
        """The tasks whose Discovery passes join rejection sampling: the training tasks, and with
        ``discovery_rejects`` this cycle's verified rejects of the route's family, within ``max_difficulty``
        (never a held-out or sealed task)."""
        ids = {t.id for t in train}
        if self.cfg.rft.discovery_rejects:
            rejects = [t for t in rejection.verified_rejects(self.discovery)
                       if t.family == self.route and self._within_difficulty(t)]
            if self.svc.sealed is not None:
                self.svc.sealed.refuse(rejects, f"Discovery's verified rejects ({self.discovery / 'rejected.parquet'})")
            ids |= {t.id for t in rejects}
        return ids - {t.id for t in held}

    def _within_difficulty(self, task: Task) -> bool:
        return self.cfg.max_difficulty is None or (task.provenance.difficulty or 1) <= self.cfg.max_difficulty

    def _tasks(self) -> tuple[list[Task], list[Task], str]:
        """Training and held-out validation tasks of the route, and where they came from."""
        if self.cfg.tasks == "archive":
            tasks, source = archive_tasks(self.run_dir, self.cfg.cycle, (self.route,), self.cfg.seeds)
        else:
            tasks, source = cycle_tasks(self.run_dir, self.cfg.cycle, self.route, self.cfg.seeds,
                                        want=self.cfg.validation_tasks + self.cfg.batch_tasks)
        if self.svc.sealed is not None:
            self.svc.sealed.refuse(tasks, f"Update's tasks ({source})")
        tasks = [t for t in tasks if self._within_difficulty(t)]
        train, held = split(tasks, self.cfg.validation_tasks, self.cfg.seed)
        if self.cfg.max_train_tasks is not None:
            train = train[: self.cfg.max_train_tasks]
        if not train or not held:
            from mindforge.errors import InputError

            raise InputError(source, "", f"need training and validation tasks of {self.route}; "
                             f"found {len(tasks)} (after filters)")
        return train, held, source

    def _parent_version(self) -> AdapterVersion:
        return self._served_version(self.route)

    def _served_version(self, route: str) -> AdapterVersion:
        served = self.doc["router"]["routes"][route]["served_adapter"]
        found = self.svc.catalog.find(served)
        if found is None:
            from mindforge.catalog import CatalogError

            raise CatalogError(f"the HCP serves {served} for {route}, which the catalog "
                               f"{self.svc.catalog.root} does not hold")
        return found

    def _rollouts(self, tasks: Sequence[Task], served: str, samples: int, seed_offset: int,
                  max_tokens: int | None, temperature: float | None = None) -> list[list[Trajectory]]:
        doc = _serving(self.doc, self.route, served)
        if temperature is not None:
            doc["provider"]["sampling"]["answer"]["temperature"] = temperature
        pin = self.route if self.cfg.routing == "pinned" and self.route != "L0" else None
        runner = self.svc.runner_for(doc, max_tokens, route=pin)
        # Every group of the step in flight at once, up to the sequences the engine decodes together.
        rcfg = RolloutConfig(group_size=samples, reward=self.reward, seed=self.cfg.seed, concurrency=ENGINE_MAX_BATCH)
        return asyncio.run(rollout_groups(
            tasks, runner, self.svc.verifier, rcfg, hcp_version=hcp_hash(doc), route=self.route,
            open_session=self.svc.open_session, seed_offset=seed_offset,
        ))

    def _validate(self, held: Sequence[Task], served: str, label: str) -> RewardStats:
        # Same seeds before and after: the comparison is paired (common random numbers).
        groups = self._rollouts(held, served, self.cfg.validation_samples, 1_000_000, self.cfg.max_tokens)
        persist(groups, self.out / "trajectories", f"validation-{label}")
        return reward_stats(groups)

    def _fingerprint(self, parent: AdapterVersion, train: Sequence[Task]) -> str:
        """What the checkpointed steps depend on. Not ``steps``: a step's batch and seeds do not depend
        on the total, so a resumed run may be given more steps."""
        import hashlib
        import json

        fields = {
            "parent": parent.name, "hcp": self.hcp_version, "route": self.route, "seed": self.cfg.seed,
            "group_size": self.cfg.group_size, "batch_tasks": self.cfg.batch_tasks, "reward": self.reward,
            "max_tokens": self.cfg.max_tokens, "routing": self.cfg.routing, "grpo": self._grpo_fields(),
            "rft": self.cfg.rft.model_dump(mode="json"),
            "train": [t.id for t in train],
        }
        return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()

    def _resume_point(self) -> Checkpoint | None:
        found = latest_checkpoint(self.checkpoints)
        if found is None:
            return None
        if found.state.get("fingerprint") != self.fingerprint or found.step > self.cfg.steps:
            from mindforge.errors import InputError

            raise InputError(str(found.path), "", "a checkpoint of an Update with other tasks, seeds, training "
                             f"fields or more than {self.cfg.steps} steps; remove {self.checkpoints} to start over")
        return found

    def _train(self, policy: Any, trainer: Any, before: RewardStats, resume: Checkpoint | None,
               tracker: Tracker, rft_trained: bool) -> list[CurveRow]:
        """``steps`` GRPO steps on ``grpo_tasks``, rollouts on the weights being trained."""
        train = self.grpo_tasks
        served = self.doc["router"]["routes"][self.route]["served_adapter"]
        curve: list[CurveRow] = []
        if resume is None and rft_trained and self.cfg.steps:
            served = self._serve_scratch(policy, 0)  # GRPO starts from the fine-tuned weights
        if resume is not None:
            restore(resume, policy, trainer)
            curve = [CurveRow(**r) for r in resume.state["curve"]]
            if resume.step < self.cfg.steps:  # the engine lost the killed attempt's scratch adapter
                served = self._serve_scratch(policy, resume.step)
        for step in range(len(curve), self.cfg.steps):
            if self.svc.progress:
                self.svc.progress(step, self.cfg.steps, None)
            row = self._step(trainer, train, step, served)
            curve.append(row)
            atomic_write_json(self.out / "curve.json", [r.model_dump() for r in curve])
            tracker.log(step, row.scalars())
            if (step + 1) % self.cfg.checkpoint_every == 0 or step + 1 == self.cfg.steps:
                save_checkpoint(self.checkpoints, step + 1, policy, trainer, {
                    "fingerprint": self.fingerprint, "curve": [r.model_dump() for r in curve],
                    "before": before.model_dump(), "rft": self.rft_state})
            if self.svc.progress:
                self.svc.progress(step + 1, self.cfg.steps, row)
            if step + 1 < self.cfg.steps:
                served = self._serve_scratch(policy, step + 1)
        return curve

    def _step(self, trainer: Any, train: Sequence[Task], step: int, served: str) -> CurveRow:
        """Rollouts of step ``step`` on ``served`` and one trainer step. Its batch and engine seeds are
        functions of (training tasks, seed, step) alone, which is what makes a resumed run repeat them."""
        import time

        start = time.monotonic()
        batch = _batch(train, step, self.cfg.batch_tasks)
        groups = self._rollouts(batch, served, self.cfg.group_size, step * 1000, self.cfg.max_tokens)
        persist(groups, self.out / "trajectories", f"train-step{step:03d}")
        usable = groups_for_training(groups)
        # Families let L0 learn its route choice (reward: the route matches the task's family).
        families = {t.id: t.family for t in batch}
        metrics = _as_dict(trainer.step(usable, families=families)) if usable else {}
        return curve_row(step, groups, metrics, time.monotonic() - start)

    def _grpo_fields(self) -> dict[str, Any]:
        """GRPOConfig fields: the route and the HCP's sampling (the trainer scores tokens under the
        distribution the engine drew them from), overridden by ``grpo``."""
        sampling = self.doc["provider"]["sampling"]
        answer, route = sampling["answer"], sampling["route"]
        return {
            "route": self.route, "temperature": answer["temperature"], "top_p": answer["top_p"],
            "route_temperature": route["temperature"], "route_top_p": route["top_p"],
            "max_completion_length": self.cfg.max_tokens or answer["max_tokens"], "seed": self.cfg.seed,
            **self.cfg.grpo,
        }

    def _serve_scratch(self, policy: Any, step: int) -> str:
        """Load the weights being trained into the engine, so the next rollouts are on policy."""
        name = f"{self.prefix}-train-{self.cfg.cycle}-{step:03d}"
        folder = self.scratch / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        write_peft_adapter(policy, TRAIN_ADAPTER)(folder)
        self.svc.engine.load(name, folder)
        self._drop_scratch_name()
        self.scratch_name = name
        return name

    def _drop_scratch_name(self) -> None:
        if self.scratch_name is not None:
            self.svc.engine.unload(self.scratch_name)
            self.scratch_name = None

    def _cleanup_scratch(self) -> None:
        self._drop_scratch_name()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _save(self, policy: Any, parent: AdapterVersion, train: Sequence[Task],
              curve: list[CurveRow], rft: RFTReport | None) -> AdapterVersion:
        used = {t.id for step in range(self.cfg.steps) for t in _batch(self.grpo_tasks, step, self.cfg.batch_tasks)}
        if rft is not None:
            used |= {t.id for t in _batch(train, max(self.cfg.cycle - 1, 0), self.cfg.rft.max_tasks or len(train))}
        used = sorted(used)
        return self.svc.catalog.save(
            self.route, write_peft_adapter(policy, TRAIN_ADAPTER), prefix=self.prefix,
            parent=parent.version, cycle=self.cfg.cycle, hcp_version=self.hcp_version,
            base_model=self.svc.base_model,
            training=TrainingData(task_ids=tuple(used), dataset=str(self.out / "trajectories"),
                                  steps=self.cfg.steps),
            metrics={"curve": [r.model_dump() for r in curve],
                     **({"rft": rft.model_dump(mode="json")} if rft else {})},
        )

    def _hand_off(self, policy: Any, entry: AdapterVersion, held: Sequence[Task],
                  before: RewardStats) -> tuple[HandoffResult, RewardStats | None]:
        from mindforge.update.handoff import teacher_forced_logprobs

        probe_tasks = list(held)[: self.cfg.probe_prompts]
        prompts = [self.svc.render_probe(self.doc, self.route, t) for t in probe_tasks]
        after_box: list[RewardStats] = []

        def validate(name: str) -> RewardStats:
            after_box.append(self._validate(held, name, "after"))
            return after_box[-1]

        result = hand_off(
            engine=self.svc.engine, entry=entry, doc=self.doc, probe_prompts=prompts,
            trainer=teacher_forced_logprobs(policy, TRAIN_ADAPTER),
            parent=teacher_forced_logprobs(policy, PARENT_ADAPTER), probe=self.cfg.probe,
            hcp_dir=self.out / "hcp", catalog=self.svc.catalog, retention=self.cfg.retention,
            validate=validate if self.cfg.validate_after else None, before=before,
            regression_tolerance=self.cfg.regression_tolerance, regression_k_se=self.cfg.regression_k_se,
        )
        return result, (after_box[-1] if after_box else None)

    def _finish(self, handed: tuple[HandoffResult, RewardStats | None], entry: AdapterVersion,
                before: RewardStats, curve: list[CurveRow], source: str, n_held: int,
                router: RouterReport | None, rft: RFTReport | None) -> UpdateResult:
        result, after = handed
        res = UpdateResult(
            route=self.route, version=result.served, candidate=entry.name, promoted=result.promoted,
            reason=result.reason, parity=result.parity, reward_before=before.mean,
            reward_after=after.mean if after else None,
            se=paired_se(before, after) if after else None, se_before=before.se,
            se_after=after.se if after else None, validation_tasks=n_held, hcp=result.hcp_hash,
            hcp_path=result.hcp_path or self.router_hcp, curve=tuple(curve), router=router, rft=rft, adapter_path=entry.path,
            trajectories=self.out / "trajectories", tasks_source=source, unloaded=result.unloaded,
            tensorboard=self.out / "tensorboard" if "tensorboard" in self.cfg.tracking else None,
        )
        self.run_dir.mark_done(self.cfg.cycle, "update", res.model_dump(mode="json"))
        # Finished: the catalog version holds the weights; the optimizer state (twice the adapter) goes.
        remove_checkpoints(self.checkpoints)
        return res


# ---------------------------------------------------------------------- helpers
def _serving(doc: dict[str, Any], route: str, served: str) -> dict[str, Any]:
    """``doc`` with ``route`` served by ``served`` (in memory, for rollouts only)."""
    import copy

    out = copy.deepcopy(doc)
    out["router"]["routes"][route]["served_adapter"] = served
    return out


def _batch(train: Sequence[Task], step: int, size: int) -> list[Task]:
    """Tasks of a step: consecutive windows over the (hash-ordered) training tasks, wrapping."""
    n = len(train)
    return [train[(step * size + i) % n] for i in range(min(size, n))]


def _as_dict(metrics: Any) -> dict[str, Any]:
    if isinstance(metrics, dict):
        return metrics
    if hasattr(metrics, "model_dump"):
        return metrics.model_dump()
    import dataclasses

    if dataclasses.is_dataclass(metrics):
        return dataclasses.asdict(metrics)
    return dict(vars(metrics))


def _shares_text(shares: dict[str, float]) -> str:
    return ", ".join(f"{family} {share:.2f}" for family, share in sorted(shares.items()))
