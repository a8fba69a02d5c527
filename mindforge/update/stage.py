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
from mindforge.store import RunDir, atomic_write_json
from mindforge.tasks.benchmarks import SealedSet
from mindforge.tasks.models import Route, Task, Trajectory
from mindforge.update.checkpoints import (
    Checkpoint,
    latest_checkpoint,
    remove_checkpoints,
    restore,
    save_checkpoint,
)
from mindforge.update.curve import CurveRow, curve_row
from mindforge.update.handoff import HandoffResult, Parity, ProbeConfig, hand_off
from mindforge.update.inputs import cycle_tasks, split
from mindforge.update.policy import PARENT_ADAPTER, TRAIN_ADAPTER
from mindforge.update.tracking import Tracker, TrackerKind, open_tracker


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

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``mindforge update --json`` prints."""
        parity = {"ok": self.parity.ok, "max_abs_diff": self.parity.max_abs_diff} if self.parity else None
        return {
            "route": self.route, "version": self.version, "parity": parity,
            "reward_before": self.reward_before, "reward_after": self.reward_after, "se": self.se,
            "hcp": self.hcp, "promoted": self.promoted, "candidate": self.candidate,
            "se_before": self.se_before, "se_after": self.se_after, "reason": self.reason,
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
        self.reward: RewardKind = config.reward or HCP_REWARDS[self.doc["guarded"]["verifier"]["reward"]]

    # ------------------------------------------------------------------ phases
    def run(self) -> UpdateResult:
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
            curve = self._train(policy, train, before, resume, tracker)
            entry = self._save(policy, parent, train, curve)
            result = self._hand_off(policy, entry, held, before)
            after = result[1]
            tracker.log(self.cfg.steps, {"validation/reward_before": before.mean,
                                         **({"validation/reward_after": after.mean} if after else {})})
        finally:
            tracker.close()
        self._cleanup_scratch()
        return self._finish(result, entry, before, curve, source, len(held))

    def _tasks(self) -> tuple[list[Task], list[Task], str]:
        """Training and held-out validation tasks of the route, and where they came from."""
        tasks, source = cycle_tasks(self.run_dir, self.cfg.cycle, self.route, self.cfg.seeds,
                                    want=self.cfg.validation_tasks + self.cfg.batch_tasks)
        if self.svc.sealed is not None:
            self.svc.sealed.refuse(tasks, f"Update's tasks ({source})")
        if self.cfg.max_difficulty is not None:
            tasks = [t for t in tasks if (t.provenance.difficulty or 1) <= self.cfg.max_difficulty]
        train, held = split(tasks, self.cfg.validation_tasks, self.cfg.seed)
        if self.cfg.max_train_tasks is not None:
            train = train[: self.cfg.max_train_tasks]
        if not train or not held:
            from mindforge.errors import InputError

            raise InputError(source, "", f"need training and validation tasks of {self.route}; "
                             f"found {len(tasks)} (after filters)")
        return train, held, source

    def _parent_version(self) -> AdapterVersion:
        served = self.doc["router"]["routes"][self.route]["served_adapter"]
        found = self.svc.catalog.find(served)
        if found is None:
            from mindforge.catalog import CatalogError

            raise CatalogError(f"the HCP serves {served} for {self.route}, which the catalog "
                               f"{self.svc.catalog.root} does not hold")
        return found

    def _rollouts(self, tasks: Sequence[Task], served: str, samples: int, seed_offset: int,
                  max_tokens: int | None) -> list[list[Trajectory]]:
        doc = _serving(self.doc, self.route, served)
        pin = self.route if self.cfg.routing == "pinned" and self.route != "L0" else None
        runner = self.svc.runner_for(doc, max_tokens, route=pin)
        # Every group of the step in flight at once: the engine batches up to 32 sequences.
        rcfg = RolloutConfig(group_size=samples, reward=self.reward, seed=self.cfg.seed, concurrency=32)
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

    def _train(self, policy: Any, train: Sequence[Task], before: RewardStats, resume: Checkpoint | None,
               tracker: Tracker) -> list[CurveRow]:
        trainer = self.svc.make_trainer(policy, self._grpo_fields())
        served = self.doc["router"]["routes"][self.route]["served_adapter"]
        curve: list[CurveRow] = []
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
                    "before": before.model_dump()})
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
              curve: list[CurveRow]) -> AdapterVersion:
        used = sorted({t.id for step in range(self.cfg.steps)
                       for t in _batch(train, step, self.cfg.batch_tasks)})
        return self.svc.catalog.save(
            self.route, write_peft_adapter(policy, TRAIN_ADAPTER), prefix=self.prefix,
            parent=parent.version, cycle=self.cfg.cycle, hcp_version=self.hcp_version,
            base_model=self.svc.base_model,
            training=TrainingData(task_ids=tuple(used), dataset=str(self.out / "trajectories"),
                                  steps=self.cfg.steps),
            metrics={"curve": [r.model_dump() for r in curve]},
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
                before: RewardStats, curve: list[CurveRow], source: str, n_held: int) -> UpdateResult:
        result, after = handed
        res = UpdateResult(
            route=self.route, version=result.served, candidate=entry.name, promoted=result.promoted,
            reason=result.reason, parity=result.parity, reward_before=before.mean,
            reward_after=after.mean if after else None,
            se=paired_se(before, after) if after else None, se_before=before.se,
            se_after=after.se if after else None, validation_tasks=n_held, hcp=result.hcp_hash,
            hcp_path=result.hcp_path, curve=tuple(curve), adapter_path=entry.path,
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
