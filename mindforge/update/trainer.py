"""GRPO on one route's LoRA adapter: ``GRPOTrainer(policy, GRPOConfig(...)).step(groups)``.

One ``step`` is one optimizer update from one batch of rollout groups:

1. samples from the engine's token ids (``samples.build_samples``): groups
   whose rewards are all equal carry no signal and are skipped;
2. token weights for the loss type, fixed for the whole step (``loss``), so
   the micro-batches' gradients add up to the gradient of one big batch;
3. a micro-batch per group: the resident-prefix forward when the group's
   samples share a prompt (``prefix``), else whole sequences a few at a time
   (``logprobs.naive_logprobs``); log-probabilities at trained positions
   only, the head applied in chunks; one backward each;
4. optional KL to the reference, the same base with the adapter disabled;
5. gradient clipping and one AdamW step over the LoRA parameters.

The policy runs in eval mode (no dropout): the importance ratio compares the
trainer's logprobs with the engine's, which has no dropout either.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from mindforge.tasks.models import Route, Trajectory
from mindforge.update.logprobs import Parts, Targets, naive_logprobs
from mindforge.update.loss import LossType, per_token_loss, token_weights
from mindforge.update.prefix import (
    resident_prefix_backward,
    resident_prefix_logprobs,
    shared_prefix_len,
)
from mindforge.update.samples import Sample, SampleSpec, Sampling, build_samples


class GRPOConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    route: Route = "L2"  # the route whose adapter the policy is
    loss_type: LossType = "dapo"  # TRL's default
    lr: float = Field(default=1e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    epsilon_low: float = Field(default=0.2, ge=0)
    epsilon_high: float = Field(default=0.2, ge=0)
    beta: float = Field(default=0.0, ge=0)  # KL coefficient; 0: no reference forward at all
    scale_rewards: bool = True  # divide advantages by the group's std
    max_completion_length: int = Field(default=256, ge=1)  # dr_grpo's constant
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    # Sampling of the hops, as the engine drew them (the HCP's answer/route sampling).
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    route_temperature: float = Field(default=0.0, ge=0)
    route_top_p: float = Field(default=1.0, gt=0, le=1)
    train_router: bool = False  # route hops train L0 (only when route == "L0")
    resident_prefix: bool = True  # used automatically when a group's samples share a prompt
    min_prefix_tokens: int = Field(default=16, ge=1)
    # Resident-prefix groups larger than this run their suffixes in micro-batches against one prefix
    # forward (same gradients, memory of the prefix plus one micro-batch); None: all G at once.
    suffix_batch_size: int | None = Field(default=None, ge=1)
    micro_batch_size: int = Field(default=4, ge=1)  # sequences a backward on the naive path
    logit_chunk: int = Field(default=256, ge=1)  # positions the head projects at a time
    seed: int = 0


class GRPOTrainer:
    def __init__(self, policy: Any, config: GRPOConfig):
        torch.manual_seed(config.seed)
        self.policy, self.cfg = policy, config
        self.parts = Parts.of(policy)
        named = [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
        self.params = [p for n, p in named if "lora_" in n]
        if not self.params:
            raise ValueError("the policy has no trainable LoRA parameters (is its adapter loaded trainable?)")
        for n, p in named:
            if "lora_" not in n:
                p.requires_grad_(False)  # LoRA only: a stray trainable base weight would drift the base
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, betas=config.betas,
                                           weight_decay=config.weight_decay)
        self.device = self.params[0].device
        pad = getattr(getattr(policy, "config", None), "pad_token_id", None)
        self.pad = int(pad) if pad is not None else 0
        self.spec = SampleSpec(
            route=config.route, train_router=config.train_router, scale_rewards=config.scale_rewards,
            answer_sampling=Sampling(config.temperature, config.top_p),
            route_sampling=Sampling(config.route_temperature, config.route_top_p),
        )
        self.steps = 0

    # ------------------------------------------------------------------ public
    def step(self, groups: Sequence[Sequence[Trajectory]], families: Mapping[str, str] | None = None) -> dict[str, Any]:
        """One optimizer update from ``groups`` (one list of scored trajectories a task)."""
        start = time.monotonic()
        built = build_samples(groups, self.spec, families)
        rewards = [t.reward for g in groups for t in g if t.reward is not None]
        metrics: dict[str, Any] = {
            "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
            "groups": built.groups, "skipped_groups": built.skipped_groups,
            "samples": len(built.samples), "tokens": sum(s.active for s in built.samples),
            "loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "resident_groups": 0,
            "updated": False,
        }
        if built.samples:
            metrics.update(self._update(built.samples))
        metrics["seconds"] = time.monotonic() - start
        self.steps += 1
        return metrics

    def supervised_step(self, samples: Sequence[Sample]) -> dict[str, Any]:
        """One optimizer update maximising the likelihood of ``samples``' masked tokens.

        The rejection-sampling and router phases use it: their samples are kept
        (verified) completions or target labels, so the objective is the
        negative log-likelihood, each sample's tokens weighted by its
        ``advantage`` (a weight here: 1, or a family's share for balance) and
        normalised over the step's tokens (the ``dapo`` weighting).
        """
        start = time.monotonic()
        metrics: dict[str, Any] = {"samples": len(samples), "tokens": sum(s.active for s in samples),
                                   "loss": 0.0, "grad_norm": 0.0, "updated": False}
        if samples:
            weights = token_weights([s.active for s in samples], "dapo", self.cfg.max_completion_length)
            self.optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            with self._eval_mode():
                for batch, w, use_prefix in self._micro_batches(samples, weights, None):
                    loss += self._backward(batch, w, use_prefix, supervised=True)[0]
            metrics.update(loss=loss, updated=True, grad_norm=self._clip_and_step())
        metrics["seconds"] = time.monotonic() - start
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs besides the adapter's tensors: AdamW's moments and step counts."""
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])

    def loss_and_grads(self, samples: Sequence[Sample], resident: bool | None = None) -> float:
        """Accumulate the step's gradients into ``.grad`` without stepping; returns the loss.

        ``resident`` forces the path (None: automatic). Used by the equivalence
        test and the benchmark to compare the two paths on the same samples.
        """
        weights = token_weights([s.active for s in samples], self.cfg.loss_type, self.cfg.max_completion_length)
        total = 0.0
        with self._eval_mode():
            for batch, w, use_prefix in self._micro_batches(samples, weights, resident):
                total += self._backward(batch, w, use_prefix)[0]
        return total

    # ------------------------------------------------------------------ internals
    def _update(self, samples: list[Sample]) -> dict[str, Any]:
        weights = token_weights([s.active for s in samples], self.cfg.loss_type, self.cfg.max_completion_length)
        self.optimizer.zero_grad(set_to_none=True)
        loss = kl_sum = clipped_sum = 0.0
        tokens = resident_groups = 0
        with self._eval_mode():
            for batch, w, use_prefix in self._micro_batches(samples, weights, None):
                mb_loss, stats = self._backward(batch, w, use_prefix)
                loss += mb_loss
                kl_sum += float(stats.get("kl", torch.zeros(1)).sum())
                clipped_sum += float(stats["clipped"].sum())
                tokens += int(stats["clipped"].numel())
                resident_groups += int(use_prefix)
        return {
            "loss": loss, "kl": kl_sum / max(tokens, 1), "clip_fraction": clipped_sum / max(tokens, 1),
            "grad_norm": self._clip_and_step(), "resident_groups": resident_groups, "updated": True,
        }

    def _clip_and_step(self) -> float:
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
        if self.cfg.max_grad_norm is not None and grads:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.cfg.max_grad_norm, norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _micro_batches(self, samples: Sequence[Sample], weights: Sequence[float],
                       resident: bool | None) -> list[tuple[list[Sample], list[float], bool]]:
        by_group: dict[int, list[int]] = {}
        for i, s in enumerate(samples):
            by_group.setdefault(s.group, []).append(i)
        out = []
        for idx in by_group.values():
            group = [samples[i] for i in idx]
            w = [weights[i] for i in idx]
            use = self._use_prefix(group) if resident is None else resident
            if use:
                out.append((group, w, True))
                continue
            size = self.cfg.micro_batch_size
            out += [(group[k : k + size], w[k : k + size], False) for k in range(0, len(group), size)]
        return out

    def _use_prefix(self, group: Sequence[Sample]) -> bool:
        return (self.cfg.resident_prefix and len(group) > 1
                and shared_prefix_len(group) >= self.cfg.min_prefix_tokens)

    def _logprobs(self, batch: Sequence[Sample], targets: Targets, use_prefix: bool) -> torch.Tensor:
        chunk = self.cfg.logit_chunk
        if use_prefix:
            k = shared_prefix_len(batch)
            return resident_prefix_logprobs(self.parts, batch, targets, k, pad=self.pad, chunk=chunk)
        return naive_logprobs(self.parts, batch, targets, pad=self.pad, chunk=chunk)

    def _backward(self, batch: list[Sample], weights: list[float], use_prefix: bool,
                  supervised: bool = False) -> tuple[float, dict[str, torch.Tensor]]:
        targets = Targets.of(batch, self.device)
        weight_N = torch.tensor([w for s, w in zip(batch, weights, strict=True) for _ in range(s.active)],
                                dtype=torch.float32, device=self.device)
        if supervised:  # NLL of the kept tokens; the advantage field carries each sample's weight
            logp_N = self._logprobs(batch, targets, use_prefix)
            loss = -(logp_N * targets.adv_N * weight_N).sum()
            loss.backward()
            return float(loss.detach()), {}
        ref_N = None
        if self.cfg.beta != 0.0:
            with torch.no_grad(), self.policy.disable_adapter():
                ref_N = self._logprobs(batch, targets, use_prefix)
        split = self.cfg.suffix_batch_size
        if use_prefix and split is not None and len(batch) > split:
            return self._split_backward(batch, weight_N, ref_N, split)
        logp_N = self._logprobs(batch, targets, use_prefix)
        loss_N, stats = per_token_loss(logp_N, targets.old_N, targets.adv_N, eps_low=self.cfg.epsilon_low,
                                       eps_high=self.cfg.epsilon_high, beta=self.cfg.beta, ref_logp_N=ref_N)
        loss = (loss_N * weight_N).sum()
        loss.backward()
        return float(loss.detach()), stats

    def _split_backward(self, batch: list[Sample], weight_N: torch.Tensor, ref_N: torch.Tensor | None,
                        split: int) -> tuple[float, dict[str, torch.Tensor]]:
        starts = [0]
        for s in batch:
            starts.append(starts[-1] + s.active)  # a sample's tokens: a contiguous run of the group's
        per_batch: list[dict[str, torch.Tensor]] = []

        def loss_of(first: int, sub: Sequence[Sample], targets: Targets, logp_N: torch.Tensor) -> torch.Tensor:
            sl = slice(starts[first], starts[first + len(sub)])
            loss_N, stats = per_token_loss(
                logp_N, targets.old_N, targets.adv_N, eps_low=self.cfg.epsilon_low, eps_high=self.cfg.epsilon_high,
                beta=self.cfg.beta, ref_logp_N=None if ref_N is None else ref_N[sl])
            per_batch.append(stats)
            return (loss_N * weight_N[sl]).sum()

        losses = resident_prefix_backward(self.parts, batch, shared_prefix_len(batch), loss_of, batch=split,
                                          pad=self.pad, chunk=self.cfg.logit_chunk, device=self.device)
        stats = {k: torch.cat([p[k] for p in per_batch]) for k in per_batch[0]}
        return sum(losses), stats

    def _eval_mode(self) -> Any:
        policy = self.policy

        class _Eval:
            def __enter__(self) -> None:
                self.was = policy.training
                policy.eval()

            def __exit__(self, *exc: object) -> None:
                policy.train(self.was)

        return _Eval() if hasattr(policy, "eval") else nullcontext()


def supervised_fit(trainer: GRPOTrainer, samples: Sequence[Sample], *, epochs: int, batch_size: int, seed: int,
                   label: str, log: Any = None) -> list[float]:
    """``epochs`` passes of ``trainer.supervised_step`` over ``samples`` in batches shuffled by ``seed``;
    the loss of each optimizer step (the rejection-sampling and router phases)."""
    import random

    losses: list[float] = []
    order = list(range(len(samples)))
    for epoch in range(epochs):
        random.Random(seed * 7919 + epoch).shuffle(order)
        for k in range(0, len(order), batch_size):
            metrics = trainer.supervised_step([samples[i] for i in order[k:k + batch_size]])
            losses.append(round(float(metrics["loss"]), 5))
            if log is not None:
                log(f"{label} epoch {epoch + 1}/{epochs} batch {k // batch_size + 1}: "
                    f"nll {metrics['loss']:.4f} ({metrics['seconds']:.1f}s)")
    return losses
