"""The base model, its tokenizer, and the LoRA adapters loaded next to it through peft.

peft loads each adapter folder; ``StackedLoRA`` (lora.py) applies all of them
to a mixed batch at once. Llama-family models run through ``FusedDecoder``
(decoder.py): packed tokens, fused projections, batched prefill. Any other
model (or an adapter on a layer the fused forward does not cover) runs
through transformers' own forward, one prompt at a time.

Public adapter names are mapped to internal peft slots (``s0``, ``s1``, ...)
that are never reused: a slot is the identity of one set of loaded weights.
The prefix cache is keyed by slot, so a name that is unloaded and loaded
again, or a new name, never meets keys/values other weights computed; and a
public name may contain characters a torch module name may not.

Only the scheduler thread calls into this object (it owns the model).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mindforge.engine.decoder import FusedDecoder, unsupported_reason
from mindforge.engine.kv import BatchKV, SlabLayer, as_cache
from mindforge.engine.lora import StackedLoRA, UnsupportedAdapter
from mindforge.errors import MindForgeError

log = logging.getLogger(__name__)

BASE_SLOT = "__base__"  # peft's name for "no adapter on this row"
# Most prompt tokens in one prefill forward: bounds its activations ([N, intermediate] per layer)
# while keeping the products large enough to run at the matmul's full rate.
PREFILL_CHUNK = 512


class AdapterError(MindForgeError):
    """An adapter folder that cannot be loaded onto this base model."""


@dataclass
class PrefillJob:
    """One prompt to prefill: ``layers`` (single-row slabs) already hold ``ids[:start]``; ``ids[start:]`` run."""

    ids: list[int]
    start: int
    layers: list[SlabLayer]
    slot: str


@dataclass(frozen=True)
class Geometry:
    num_layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_positions: int


def pick_device(requested: str | None = None) -> torch.device:
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class EngineModel:
    def __init__(self, path: Path, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path)
        self.device = pick_device(str(device) if device else None)
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        base = AutoModelForCausalLM.from_pretrained(str(self.path), dtype=dtype)
        self.base = base.to(self.device).eval()
        self.model = self.base  # becomes the PeftModel once an adapter is loaded
        self.peft = None
        cfg = self.base.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.geometry = Geometry(cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", cfg.num_attention_heads),
                                 head_dim, cfg.vocab_size, getattr(cfg, "max_position_embeddings", 2048))
        params = inspect.signature(type(self.base).forward).parameters
        # transformers 5.x renamed past_key_values to cache (the old name still works, with a warning)
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.eos_ids = self._eos_ids()
        self._next_slot = 0
        self.slots: list[str] = []  # loaded peft slots, in load order
        self.lora = StackedLoRA()
        why_not = unsupported_reason(self.base)
        self.fused = FusedDecoder(self.base) if why_not is None else None
        if why_not is not None:
            log.info("%s: transformers forward (the fused forward does not cover %s)", self.path.name, why_not)

    @property
    def uses_fused(self) -> bool:
        """The fused forward serves every loaded adapter (none has LoRA outside the seven projections)."""
        return self.fused is not None and self.lora.unplaced == 0

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (getattr(self.base, "generation_config", None), self.base.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list | tuple):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    # ------------------------------------------------------------ adapters
    def load_adapter(self, folder: Path) -> str:
        """Load a peft LoRA folder into a fresh slot; returns the slot name."""
        folder = Path(folder)
        config_path = folder / "adapter_config.json"
        if not config_path.is_file():
            raise AdapterError(f"{folder}: not a peft adapter folder (no adapter_config.json)")
        try:
            kind = json.loads(config_path.read_text()).get("peft_type")
        except ValueError as exc:
            raise AdapterError(f"{config_path}: not valid JSON ({exc})") from None
        if kind not in (None, "LORA"):
            raise AdapterError(f"{config_path}: peft_type is {kind!r}; only LORA adapters are served")
        slot = f"s{self._next_slot}"
        self._next_slot += 1
        try:
            if self.peft is None:
                from peft import PeftModel

                self.peft = PeftModel.from_pretrained(self.base, str(folder), adapter_name=slot, is_trainable=False)
                self.peft.eval()
                self.model = self.peft
            else:
                self.peft.load_adapter(str(folder), adapter_name=slot, is_trainable=False)
        except Exception as exc:  # peft raises many types for a folder that does not fit this base
            raise AdapterError(f"{folder}: cannot be loaded onto {self.path.name}: {type(exc).__name__}: {exc}") from exc
        self.peft.to(self.device)
        try:
            StackedLoRA.check_slot(self.peft, slot)
        except UnsupportedAdapter as exc:
            self.peft.delete_adapter(slot)
            raise AdapterError(f"{folder}: {exc}") from None
        self.slots.append(slot)
        self._restack()
        return slot

    def _restack(self) -> None:
        self.lora.rebuild(self.peft, self.slots)
        if self.fused is not None:
            self.fused.set_lora(self.lora.factors, self.lora.rank)

    def delete_adapter(self, slot: str) -> None:
        if self.peft is not None and slot in self.peft.peft_config:
            self.peft.delete_adapter(slot)
            self.slots.remove(slot)
            self._restack()

    # ------------------------------------------------------------ forward
    @torch.inference_mode()
    def decode(self, ids: Sequence[int], batch: BatchKV, slots: Sequence[str]) -> torch.Tensor:
        """Logits ``[B, V]`` (float32) for one new token per batch row; the slabs gain a column (not ``kv_len``)."""
        ids_B = torch.tensor(list(ids), device=self.device)
        if not self.uses_fused:
            mask_B_K, pos_B_1 = batch.decode_inputs(self.device)
            return self.forward(ids_B[:, None], mask_B_K, pos_B_1, batch.layers, list(slots))
        pos_B = torch.tensor(batch.kv_len, device=self.device)
        masks = self.lora.token_masks(list(slots), None, self.device, self.dtype)
        return self.fused.decode(ids_B, pos_B, batch.layers, batch.kv_len, masks)

    @torch.inference_mode()
    def prefill(self, jobs: Sequence[PrefillJob], chunk: int = PREFILL_CHUNK) -> torch.Tensor:
        """Logits ``[J, V]`` at each job's last prompt token; prompts run together, ``chunk`` tokens a forward."""
        if not self.uses_fused:
            return torch.cat([self._prefill_one(job) for job in jobs])
        logits: list[torch.Tensor | None] = [None] * len(jobs)
        packed = _Packed()
        for j, job in enumerate(jobs):
            a = job.start
            while a < len(job.ids):
                b = min(len(job.ids), a + chunk - len(packed.ids))
                packed.add(job, a, b, j if b == len(job.ids) else None)
                a = b
                if len(packed.ids) == chunk:
                    self._run_packed(packed, logits)
                    packed = _Packed()
        if packed.ids:
            self._run_packed(packed, logits)
        return torch.stack(logits)

    def _run_packed(self, packed: _Packed, logits: list) -> None:
        masks = self.lora.token_masks(packed.slots, packed.counts, self.device, self.dtype)
        ids_N = torch.tensor(packed.ids, device=self.device)
        pos_N = torch.tensor(packed.pos, device=self.device)
        out = self.fused.prefill(ids_N, pos_N, packed.pieces, [n for n, _ in packed.last], masks)
        for row, (_, j) in enumerate(packed.last):
            logits[j] = out[row]

    def _prefill_one(self, job: PrefillJob) -> torch.Tensor:
        new_1_T = torch.tensor([job.ids[job.start:]], device=self.device)
        mask_1_K = torch.ones((1, len(job.ids)), dtype=torch.long, device=self.device)
        pos_1_T = torch.arange(job.start, len(job.ids), device=self.device)[None]
        return self.forward(new_1_T, mask_1_K, pos_1_T, job.layers, [job.slot])

    @torch.inference_mode()
    def forward(self, ids_B_T: torch.Tensor, mask_B_K: torch.Tensor, pos_B_T: torch.Tensor,
                layers: list[SlabLayer], slots: list[str]) -> torch.Tensor:
        """transformers' forward: logits ``[B, V]`` (float32) at each row's last position; ``layers`` grow by ``T``."""
        kwargs = {self._cache_kw: as_cache(layers)}
        # the LoRA-injected transformers model under the PeftModel wrapper; StackedLoRA adds the deltas
        net = self.base if self.peft is None else self.peft.base_model.model
        self.lora.set_rows(list(slots), self.device, self.dtype)
        try:
            out = net(input_ids=ids_B_T, attention_mask=mask_B_K, position_ids=pos_B_T, use_cache=True,
                      logits_to_keep=1, **kwargs)
        finally:
            self.lora.clear()
        return out.logits[:, -1].float()


class _Packed:
    """Prompt pieces packed into one forward: their tokens, positions, slabs and adapters."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.pos: list[int] = []
        self.pieces: list[tuple[list[SlabLayer], int, int]] = []
        self.slots: list[str] = []
        self.counts: list[int] = []
        self.last: list[tuple[int, int]] = []  # (packed index of a prompt's last token, job index)

    def add(self, job: PrefillJob, a: int, b: int, ends_job: int | None) -> None:
        n = len(self.ids)
        self.ids += job.ids[a:b]
        self.pos += range(a, b)
        self.pieces.append((job.layers, n, n + b - a))
        self.slots.append(job.slot)
        self.counts.append(b - a)
        if ends_job is not None:
            self.last.append((n + b - a - 1, ends_job))
