"""The base model, its tokenizer, and the LoRA adapters loaded next to it through peft.

peft loads each adapter folder; ``StackedLoRA`` (lora.py) applies all of them
to a mixed batch at once.

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
from dataclasses import dataclass
from pathlib import Path

import torch

from mindforge.engine.kv import SlabLayer, as_cache
from mindforge.engine.lora import StackedLoRA, UnsupportedAdapter
from mindforge.errors import MindForgeError

BASE_SLOT = "__base__"  # peft's name for "no adapter on this row"


class AdapterError(MindForgeError):
    """An adapter folder that cannot be loaded onto this base model."""


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
        self.lora.rebuild(self.peft, self.slots)
        return slot

    def delete_adapter(self, slot: str) -> None:
        if self.peft is not None and slot in self.peft.peft_config:
            self.peft.delete_adapter(slot)
            self.slots.remove(slot)
            self.lora.rebuild(self.peft, self.slots)

    # ------------------------------------------------------------ forward
    @torch.inference_mode()
    def forward(self, ids_B_T: torch.Tensor, mask_B_K: torch.Tensor, pos_B_T: torch.Tensor,
                layers: list[SlabLayer], slots: list[str]) -> torch.Tensor:
        """Logits ``[B, V]`` (float32) at each row's last position; ``layers`` grow by ``T`` columns."""
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
