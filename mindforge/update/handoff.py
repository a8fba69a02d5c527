"""Handing a trained adapter to the serving engine: load, prove, promote or roll back.

Only the adapter moves; the base model stays loaded. The order is fixed and
each step can stop the handoff:

1. the new version is loaded under its own versioned name
   (``POST /v1/load_lora_adapter``), so no cache or slot of the old name can
   answer for it; a name the engine already serves is refused, never
   reloaded (the engine would keep answering with what it loaded first);
2. a parity probe asks the engine for fixed prompts' completions with their
   logprobs (temperature 1, top-p 1: the reported distribution is the
   model's own) and compares them with the trainer's teacher-forced logprobs
   of the same token ids: a stale, partially loaded or corrupted adapter
   shows up as a difference;
3. an optional validation compares the reward after with the reward before;
4. only then is the HCP's served-adapter mapping moved, as a new HCP version
   written atomically; versions beyond the retention count are unloaded.

A failure at 1–3 unloads the new name and leaves the old mapping, so the
engine keeps serving exactly what it served before.

Tolerance. Engine and trainer run the same fp32 weights and the same peft
LoRA; what differs is arithmetic order (incremental decoding with a KV cache
and batching on the engine, one full-sequence forward in the trainer). fp32
rounding of that order alone moves a token logprob of the default model by
about 1e-5; the default tolerance 1e-3 leaves two orders of margin and is
still far below what a wrong adapter produces. Because a tiny update could
hide inside any tolerance, the probe also reports the trainer-side
``separation``: how far the new weights' logprobs are from the parent's on
the same tokens. A probe whose separation is below the tolerance could not
have told the two apart, and says so (``discriminative``).

An engine that computes in bfloat16 (``settings.engine_dtype``, reported on
its ``/health``) rounds every product to 8 bits of mantissa: token logprobs
then differ from the trainer's by up to about 0.1, and the probe is held to
``bf16_tolerance`` instead. It still catches a wrong or corrupted adapter
(those differ by about 1 and more) but no longer a small update, which
``discriminative`` then says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindforge.catalog import AdapterCatalog, AdapterVersion
from mindforge.engine.admin import EngineAdmin, EngineError
from mindforge.hcp import apply_patch, hcp_hash, pretty_json, served_adapter_patch
from mindforge.rollouts import RewardStats, paired_se
from mindforge.store import atomic_write_text


# ---------------------------------------------------------------------- parity
class ProbeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tolerance: float = Field(default=1e-3, gt=0)  # max abs logprob difference, see module doc
    # An engine that reports bfloat16 (settings.engine_dtype) differs from the fp32 trainer by up to 0.12
    # on the default model (measured on real prompts, mean 0.02): twice that is its bound.
    bf16_tolerance: float = Field(default=0.25, gt=0)
    max_tokens: int = Field(default=16, ge=1)
    seed: int = 1234


class Parity(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    max_abs_diff: float
    tolerance: float
    tokens: int
    separation: float | None = None  # trainer-side max |new - parent| on the same tokens
    discriminative: bool | None = None
    detail: str = ""


LogprobFn = Callable[[Sequence[int], Sequence[int]], list[float]]
"""(prompt ids, completion ids) -> the trainer's logprob of each completion id."""


def teacher_forced_logprobs(model: Any, adapter: str | None = None) -> LogprobFn:
    """The trainer model's logprobs of given completion ids after a prompt (no grad).

    ``adapter`` names a peft adapter to use for the call (the parent version,
    loaded beside the trained one); the active adapter is restored afterwards.

    Only the completion positions go through the output projection
    (``logits_to_keep``); probe sequences are short, so one forward each.
    """
    import torch

    def fn(prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
        device = next(model.parameters()).device
        was_training = model.training
        previous = getattr(model, "active_adapter", None)
        if adapter is not None:
            model.set_adapter(adapter)
        model.eval()
        try:
            with torch.no_grad():
                # Logits of the last T+1 positions; the final one predicts past the end.
                n = len(completion_ids)
                logits_T_V = model(ids.to(device), logits_to_keep=n + 1).logits[0, :n].float()
                logp_T_V = torch.log_softmax(logits_T_V, dim=-1)
                target_T = torch.tensor(list(completion_ids), device=device)
                return logp_T_V.gather(1, target_T[:, None])[:, 0].tolist()
        finally:
            if adapter is not None and previous is not None:
                model.set_adapter(previous)
            model.train(was_training)

    return fn


def parity_probe(
    engine: EngineAdmin,
    served_name: str,
    prompts: Sequence[Sequence[int]],
    trainer: LogprobFn,
    config: ProbeConfig,
    parent: LogprobFn | None = None,
) -> Parity:
    """Compare the served adapter with the trainer on the engine's own samples."""
    worst, count, sep = 0.0, 0, 0.0
    dtype = engine.dtype()
    if dtype not in (None, "float32"):
        config = config.model_copy(update={"tolerance": config.bf16_tolerance})
    try:
        for i, prompt in enumerate(prompts):
            ids, engine_lp = engine.sample(served_name, prompt, config.max_tokens, config.seed + i)
            if not ids:
                continue
            mine = trainer(prompt, ids)
            worst = max(worst, max(_diffs(engine_lp, mine)))
            count += len(ids)
            if parent is not None:
                sep = max(sep, max(_diffs(parent(prompt, ids), mine)))
    except EngineError as exc:
        return Parity(ok=False, max_abs_diff=math.inf, tolerance=config.tolerance, tokens=count,
                      detail=str(exc))
    if count == 0:
        return Parity(ok=False, max_abs_diff=math.inf, tolerance=config.tolerance, tokens=0,
                      detail="the engine returned no tokens to compare")
    return Parity(
        ok=worst <= config.tolerance, max_abs_diff=worst, tolerance=config.tolerance, tokens=count,
        separation=sep if parent is not None else None,
        discriminative=(sep > config.tolerance) if parent is not None else None,
        detail=f"a {dtype} engine: bound {config.tolerance:g}" if dtype not in (None, "float32") else "",
    )


def _diffs(a: Sequence[float], b: Sequence[float]) -> list[float]:
    # -inf on either side (a token the model rules out) counts as infinitely far.
    return [abs(x - y) if math.isfinite(x) and math.isfinite(y) else math.inf for x, y in zip(a, b, strict=True)]


# ---------------------------------------------------------------------- HCP
def promote(doc: dict[str, Any], route: str, served_name: str, hcp_dir: Path) -> tuple[dict[str, Any], str, Path]:
    """A new HCP version serving ``served_name`` for ``route``, written as ``<hash>.hcp.json``."""
    new_doc = apply_patch(doc, served_adapter_patch(route, served_name), source="update handoff")
    digest = hcp_hash(new_doc)
    path = Path(hcp_dir) / f"{digest}.hcp.json"
    atomic_write_text(path, pretty_json(new_doc))
    return new_doc, digest, path


def served_names(doc: dict[str, Any]) -> list[str]:
    return [spec["served_adapter"] for spec in doc["router"]["routes"].values()]


# ---------------------------------------------------------------------- handoff
class HandoffResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    promoted: bool
    served: str  # what the route serves after the handoff
    candidate: str  # the version that was tried
    parity: Parity | None = None
    validation_after: RewardStats | None = None
    hcp_hash: str
    hcp_path: Path | None = None
    unloaded: tuple[str, ...] = ()
    reason: str = ""


def hand_off(
    *,
    engine: EngineAdmin,
    entry: AdapterVersion,
    doc: dict[str, Any],
    probe_prompts: Sequence[Sequence[int]],
    trainer: LogprobFn,
    probe: ProbeConfig,
    hcp_dir: Path,
    catalog: AdapterCatalog,
    retention: int,
    parent: LogprobFn | None = None,
    validate: Callable[[str], RewardStats] | None = None,
    before: RewardStats | None = None,
    regression_tolerance: float = 0.0,
    regression_k_se: float = 0.0,
    require_gain: bool = False,
) -> HandoffResult:
    """Load ``entry``, probe it, validate it, then promote it or roll it back.

    A regression is ``after < before - max(regression_tolerance, regression_k_se
    x SE)``, SE that of the paired per-task difference: a tiny validation
    split is noisy, and noise alone must not roll back a good adapter. With
    ``require_gain`` an adapter that is merely no worse is rolled back too
    (the router: a retrained route hop that routes no better only moves
    requests around).
    """
    route = entry.route
    old = doc["router"]["routes"][route]["served_adapter"]

    def rollback(reason: str, **kw: Any) -> HandoffResult:
        engine.unload(entry.name)
        return HandoffResult(promoted=False, served=old, candidate=entry.name, hcp_hash=hcp_hash(doc),
                             reason=reason, **kw)

    # Versions are immutable names: an engine that already serves this name (another run sharing the
    # engine, or a rerun after a crash) would keep answering with whatever it loaded first. Refuse, and
    # leave that adapter alone: it is not ours to unload.
    try:
        already = entry.name in engine.loaded()
    except EngineError as exc:
        return HandoffResult(promoted=False, served=old, candidate=entry.name, hcp_hash=hcp_hash(doc),
                             reason=f"the engine did not list its adapters: {exc}")
    if already:
        return HandoffResult(promoted=False, served=old, candidate=entry.name, hcp_hash=hcp_hash(doc),
                             reason=f"the engine already serves an adapter named {entry.name}; a version name is "
                                    "loaded once and never reloaded, so this one was not handed over")
    try:
        engine.load(entry.name, entry.path)
    except EngineError as exc:
        return rollback(f"load failed: {exc}")
    parity = parity_probe(engine, entry.name, probe_prompts, trainer, probe, parent)
    if not parity.ok:
        return rollback(f"parity probe failed: max |diff| {parity.max_abs_diff:.3g} > {probe.tolerance:g}"
                        + (f" ({parity.detail})" if parity.detail else ""), parity=parity)
    after = validate(entry.name) if validate is not None else None
    if after is not None and before is not None:
        margin = max(regression_tolerance, regression_k_se * paired_se(before, after))
        if after.mean < before.mean - margin:
            return rollback(f"validation regressed: {after.mean:.3f} < {before.mean:.3f} - {margin:.3f}",
                            parity=parity, validation_after=after)
        if require_gain and after.mean <= before.mean:
            return rollback(f"no gain: validation {after.mean:.3f} <= {before.mean:.3f}", parity=parity,
                            validation_after=after)
    new_doc, digest, path = promote(doc, route, entry.name, hcp_dir)
    unloaded = unload_stale(engine, catalog, route, retention, in_use=served_names(new_doc))
    return HandoffResult(promoted=True, served=entry.name, candidate=entry.name, parity=parity,
                         validation_after=after, hcp_hash=digest, hcp_path=path, unloaded=tuple(unloaded))


def unload_stale(engine: EngineAdmin, catalog: AdapterCatalog, route: str, keep: int,
                 in_use: Sequence[str]) -> list[str]:
    """Unload versions of ``route`` beyond the newest ``keep`` that nothing serves."""
    loaded = set(engine.loaded())
    return [v.name for v in catalog.stale(route, keep, in_use) if v.name in loaded and engine.unload(v.name)]
