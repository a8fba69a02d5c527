"""Every loaded LoRA adapter applied to a mixed batch in two matmuls per layer.

peft loads the adapters (config, target modules, rank and alpha patterns,
scaling); this module only changes how a forward applies them. peft's mixed
batch path (``adapter_names=``) loops over the adapters present in the batch
in Python for each of the ~210 LoRA layers of the default model, about 25 ms
a decode step. Here each layer keeps all slots' factors side by side:

    A_R_in  = [A_s0; A_s1; ...]            (rank-stacked)
    B_out_R = [B_s0 * scale_s0, B_s1 * scale_s1, ...]
    delta   = ((x @ A_R_in^T) * mask_B_1_R) @ B_out_R^T

where ``mask`` keeps, for each row, the columns of that row's slot (all zero
for a base-model row, and for a row of a slot whose B factors are all zero,
which is the base model exactly). Every layer uses the same column layout (a slot gets
the largest rank it has anywhere, zero-padded), so one mask serves the whole
forward. The result is peft's ``B(A(x)) * scale`` up to float rounding; the
engine's parity tests compare against a plain peft forward.

peft's own LoRA computation is switched off on these layers (their
``disable_adapters`` flag) and a forward hook adds ``delta`` instead. The
fused forward (decoder.py) does not run these modules at all; it takes the
same stacked factors per projection (``factors``) and a mask per token
(``token_masks``).
"""

from __future__ import annotations

import re

import torch

from mindforge.errors import MindForgeError


class UnsupportedAdapter(MindForgeError):
    pass


# "....layers.3.self_attn.q_proj" -> (3, "q_proj"): where a LoRA layer sits in a Llama-family model
_PROJECTION = re.compile(r"\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)$")


class StackedLoRA:
    def __init__(self) -> None:
        self.columns: dict[str, tuple[int, int]] = {}  # slot -> [start, end) in the stacked rank
        self.rank = 0
        # (layer index, projection name) -> (A_R_in, B_out_R); ``unplaced`` counts LoRA layers elsewhere
        self.by_projection: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
        self.unplaced = 0
        self._mask: torch.Tensor | None = None
        self._hooked: set[int] = set()

    @staticmethod
    def lora_layers(peft_model) -> list:
        from peft.tuners.lora import Linear, LoraLayer

        layers = [m for m in peft_model.modules() if isinstance(m, LoraLayer)]
        odd = sorted({type(m).__name__ for m in layers if not isinstance(m, Linear)})
        if odd:
            raise UnsupportedAdapter(f"LoRA on {', '.join(odd)} layers is not served (only Linear layers)")
        return layers

    @staticmethod
    def check_slot(peft_model, slot: str) -> None:
        for m in StackedLoRA.lora_layers(peft_model):
            if slot in getattr(m, "lora_variant", {}) or (slot in m.lora_B and m.lora_B[slot].bias is not None):
                raise UnsupportedAdapter("DoRA and LoRA-bias adapters are not served (plain LoRA only)")
            if getattr(m, "fan_in_fan_out", False):
                raise UnsupportedAdapter("fan_in_fan_out adapters are not served")

    def rebuild(self, peft_model, slots: list[str]) -> None:
        """Restack the factors of ``slots`` on every LoRA layer (after a load or an unload)."""
        layers = self.lora_layers(peft_model)
        # A slot whose every B factor is zero (a fresh adapter, as every route's v0000 is) adds exactly
        # zero: it gets no columns and its rows run as the base model. Measured: the cycle-0 eval spent
        # 14% of the engine's time on four such rank-8 adapters.
        ranks = {s: max((m.lora_A[s].weight.shape[0] for m in layers if s in m.lora_A), default=0)
                 for s in slots if any(s in m.lora_B and m.lora_B[s].weight.any() for m in layers)}
        self.columns, start = {}, 0
        for s, rank in ranks.items():
            self.columns[s] = (start, start + rank)
            start += rank
        self.rank = start
        for m in layers:
            m._disable_adapters = True  # peft computes the base only; the hook adds every slot's delta
            base = m.get_base_layer()
            w = base.weight
            a_R_in = w.new_zeros((self.rank, base.in_features))
            b_out_R = w.new_zeros((base.out_features, self.rank))
            for s, (lo, _) in self.columns.items():
                if s in m.lora_A:
                    a = m.lora_A[s].weight
                    a_R_in[lo:lo + a.shape[0]] = a
                    b_out_R[:, lo:lo + a.shape[0]] = m.lora_B[s].weight * m.scaling[s]
            m.mf_lora_A = a_R_in
            m.mf_lora_B = b_out_R
            if id(m) not in self._hooked:
                m.register_forward_hook(self._add_delta)
                self._hooked.add(id(m))
        self._place(peft_model)

    def _place(self, peft_model) -> None:
        from peft.tuners.lora import LoraLayer

        self.by_projection, self.unplaced = {}, 0
        for name, m in peft_model.named_modules():
            if isinstance(m, LoraLayer):
                where = _PROJECTION.search(name)
                if where is None:
                    self.unplaced += 1
                else:
                    self.by_projection[(int(where[1]), where[2])] = (m.mf_lora_A, m.mf_lora_B)

    def factors(self, layer: int, projection: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.by_projection.get((layer, projection))

    def token_masks(self, slots: list[str], counts: list[int] | None, device: torch.device,
                    dtype: torch.dtype) -> dict[int, torch.Tensor] | None:
        """Column masks ``{k: [N, k*R]}`` (the row mask repeated k times) for ``counts[i]`` tokens of ``slots[i]``.

        None when no row uses an adapter: the forward then skips every LoRA product.
        """
        if self.rank == 0 or not any(s in self.columns for s in slots):
            return None
        mask_B_R = torch.zeros((len(slots), self.rank), dtype=dtype)
        for i, s in enumerate(slots):
            if s in self.columns:
                lo, hi = self.columns[s]
                mask_B_R[i, lo:hi] = 1
        if counts is not None:
            mask_B_R = mask_B_R.repeat_interleave(torch.tensor(counts), dim=0)
        mask_N_R = mask_B_R.to(device)
        return {k: mask_N_R.repeat(1, k) if k > 1 else mask_N_R for k in (1, 2, 3)}

    def set_rows(self, slots: list[str], device: torch.device, dtype: torch.dtype) -> None:
        """Use ``slots`` (one per batch row; unknown slots mean the base) for the next forward."""
        if not any(s in self.columns for s in slots) or self.rank == 0:
            self._mask = None
            return
        mask_B_R = torch.zeros((len(slots), self.rank), dtype=dtype)
        for i, s in enumerate(slots):
            if s in self.columns:
                lo, hi = self.columns[s]
                mask_B_R[i, lo:hi] = 1
        self._mask = mask_B_R[:, None, :].to(device)

    def clear(self) -> None:
        self._mask = None

    def _add_delta(self, module, args, output):
        if self._mask is None:
            return output
        x = args[0]
        return output + ((x @ module.mf_lora_A.T) * self._mask) @ module.mf_lora_B.T
