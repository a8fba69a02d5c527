"""A direct forward for Llama-family models over packed tokens, with fused projections and stacked LoRA.

transformers' generic forward costs more than the matrix products on this
machine's cores: per layer it rebuilds masks, calls ~15 modules, and peft's
hooks add two more products for each of seven projections. Here a forward
is, per layer, four weight products (q|k|v fused, o, gate|up fused, down),
each followed by one LoRA pair for all loaded adapters at once (lora.py's
stacked factors; rows of the mask pick each token's adapter).

Tokens are *packed*: the products see one ``[N, hidden]`` matrix whatever
sequences the tokens belong to, and only attention knows the sequences.
Two attention shapes use this:

- a decode step: row ``i`` is one token of batch row ``i``, attending over
  that row's columns of the left-padded slabs (kv.py's ``BatchKV``);
- a prefill chunk: consecutive *pieces* of prompts, each attending causally
  over its own single-row slab (which may already hold a cached prefix or an
  earlier chunk of the same prompt).

Invariant: the fused weights are the model's own storage (the projections'
``weight`` become views of them), so nothing is copied and the transformers
forward, still used by models this module does not cover, sees the same
numbers. The math is the transformers forward's, reordered: logprobs agree
with a teacher-forced transformers + peft forward to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mindforge.engine.kv import SlabLayer

SUPPORTED_TYPES = ("llama", "qwen2")
QKV, GATE_UP = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")


def unsupported_reason(model) -> str | None:
    """Why ``model`` (a transformers causal LM) cannot use this forward, or None when it can."""
    cfg = model.config
    if cfg.model_type not in SUPPORTED_TYPES:
        return f"model_type {cfg.model_type!r}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "mlp_bias", False):
        return "sliding window or MLP bias"
    return None


@dataclass
class _Group:
    """Projections of one input fused into one product; ``lora_*`` is None when no adapter touches them."""

    weight: torch.Tensor  # [sum_out, in], the modules' storage
    bias: torch.Tensor | None
    names: tuple[str, ...]
    sizes: tuple[int, ...]  # each member's output features, in order
    lora_A: torch.Tensor | None = None  # [k*R, in]: each member's stacked A, side by side
    lora_B: torch.Tensor | None = None  # [sum_out, k*R]: block-diagonal, scale folded in

    def __call__(self, x_N_in: torch.Tensor, masks: dict[int, torch.Tensor] | None) -> torch.Tensor:
        out = F.linear(x_N_in, self.weight, self.bias)
        if self.lora_A is not None and masks is not None:
            out = out + (F.linear(x_N_in, self.lora_A) * masks[len(self.names)]) @ self.lora_B.T
        return out


def _fuse(modules: Sequence[torch.nn.Linear], names: tuple[str, ...]) -> _Group:
    weight = torch.cat([m.weight.detach() for m in modules])
    has_bias = [m.bias is not None for m in modules]
    bias = torch.cat([m.bias.detach() for m in modules]) if all(has_bias) else None
    if any(has_bias) and bias is None:
        raise ValueError("projections fused together must all have a bias or none")
    start = 0
    for m in modules:  # point the modules at the fused storage: one copy of the weights, not two
        n = m.weight.shape[0]
        m.weight.data = weight[start:start + n]
        if bias is not None:
            m.bias.data = bias[start:start + n]
        start += n
    return _Group(weight, bias, names, tuple(m.weight.shape[0] for m in modules))


@dataclass
class _Layer:
    in_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: _Group
    o: _Group
    gate_up: _Group
    down: _Group


def _rotate(x_N_H_D: torch.Tensor, cos_N_1_D: torch.Tensor, sin_N_1_D: torch.Tensor) -> torch.Tensor:
    half = x_N_H_D.shape[-1] // 2
    rotated = torch.cat((-x_N_H_D[..., half:], x_N_H_D[..., :half]), dim=-1)
    return x_N_H_D * cos_N_1_D + rotated * sin_N_1_D


def decode_attention(q_B_Hk_G_D: torch.Tensor, keys_B_Hk_K_D: torch.Tensor, values_B_Hk_K_D: torch.Tensor,
                     bias_B_1_1_K: torch.Tensor, scale: float) -> torch.Tensor:
    """One new token a row over its cached columns; a kv head's G query heads share its keys (GQA)."""
    scores = torch.matmul(q_B_Hk_G_D, keys_B_Hk_K_D.transpose(-1, -2)).mul_(scale).add_(bias_B_1_1_K)
    return torch.matmul(torch.softmax(scores, dim=-1), values_B_Hk_K_D)


# attend(layer index, q [N,H,D], k [N,Hkv,D], v [N,Hkv,D]) -> [N, H*D]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class FusedDecoder:
    """The forward of one loaded Llama-family model; build it before peft wraps the projections."""

    def __init__(self, model):
        inner = model.model
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        self.eps = cfg.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = []
        for block in inner.layers:
            attn, mlp = block.self_attn, block.mlp
            self.layers.append(_Layer(
                block.input_layernorm.weight, block.post_attention_layernorm.weight,
                _fuse([attn.q_proj, attn.k_proj, attn.v_proj], QKV), _fuse([attn.o_proj], ("o_proj",)),
                _fuse([mlp.gate_proj, mlp.up_proj], GATE_UP), _fuse([mlp.down_proj], ("down_proj",))))

    def set_lora(self, factors: Callable[[int, str], tuple[torch.Tensor, torch.Tensor] | None], rank: int) -> None:
        """Take each projection's stacked factors (``factors(layer, name)`` -> ``(A_R_in, B_out_R)`` or None)."""
        for li, layer in enumerate(self.layers):
            for group in (layer.qkv, layer.o, layer.gate_up, layer.down):
                found = [factors(li, name) for name in group.names]
                if rank == 0 or all(f is None for f in found):
                    group.lora_A = group.lora_B = None
                    continue
                group.lora_A, group.lora_B = _stack_group(group, found, rank)

    # ------------------------------------------------------------ forwards
    def decode(self, ids_B: torch.Tensor, pos_B: torch.Tensor, layers: list[SlabLayer], kv_len: Sequence[int],
               masks: dict[int, torch.Tensor] | None) -> torch.Tensor:
        """Logits ``[B, V]`` for one new token a row; every slab gains one column (left-padded layout kept)."""
        width = layers[0].length
        kv_len_B = torch.tensor(kv_len, device=ids_B.device)
        cols_K = torch.arange(width + 1, device=ids_B.device)
        # a row's padding is the columns before its real tokens; the new column is always its own
        bias_B_1_1_K = torch.zeros((len(kv_len), 1, 1, width + 1), dtype=self.embed.dtype, device=ids_B.device)
        bias_B_1_1_K.masked_fill_((cols_K[None, :] < (width - kv_len_B)[:, None])[:, None, None, :], float("-inf"))
        b, g = len(kv_len), self.heads // self.kv_heads

        def attend(li: int, q_B_H_D, k_B_Hk_D, v_B_Hk_D):
            keys, values = layers[li].update(k_B_Hk_D[:, :, None], v_B_Hk_D[:, :, None])
            q_B_Hk_G_D = q_B_H_D.view(b, self.kv_heads, g, self.head_dim)
            return decode_attention(q_B_Hk_G_D, keys, values, bias_B_1_1_K, self.scale).reshape(b, -1)

        hidden_B_E = self._run(ids_B, pos_B, masks, attend)
        return F.linear(hidden_B_E, self.lm_head).float()

    def prefill(self, ids_N: torch.Tensor, pos_N: torch.Tensor, pieces: Sequence[tuple[list[SlabLayer], int, int]],
                last: Sequence[int], masks: dict[int, torch.Tensor] | None) -> torch.Tensor:
        """Logits ``[len(last), V]`` at packed positions ``last``; piece ``(slabs, a, b)`` appends tokens a..b-1."""

        def attend(li: int, q_N_H_D, k_N_Hk_D, v_N_Hk_D):
            out = []
            for slabs, a, b in pieces:
                before = slabs[li].length
                keys, values = slabs[li].update(k_N_Hk_D[a:b].transpose(0, 1)[None], v_N_Hk_D[a:b].transpose(0, 1)[None])
                q = q_N_H_D[a:b].transpose(0, 1)[None]
                mask = None
                if before:  # causal with an offset: token i sees the cached prefix and tokens up to itself
                    cols = torch.arange(before + b - a, device=q.device)
                    mask = cols[None, :] <= (before + torch.arange(b - a, device=q.device))[:, None]
                o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=not before,
                                                   scale=self.scale, enable_gqa=True)
                out.append(o[0].transpose(0, 1).reshape(b - a, -1))
            return torch.cat(out)

        hidden_N_E = self._run(ids_N, pos_N, masks, attend)
        return F.linear(hidden_N_E[list(last)], self.lm_head).float()

    def _run(self, ids_N: torch.Tensor, pos_N: torch.Tensor, masks, attend: Attend) -> torch.Tensor:
        h_N_E = F.embedding(ids_N, self.embed)
        cos_1_N_D, sin_1_N_D = self.rotary(h_N_E, pos_N[None])
        cos_N_1_D, sin_N_1_D = cos_1_N_D[0, :, None], sin_1_N_D[0, :, None]
        n, hd, kvd = len(ids_N), self.heads * self.head_dim, self.kv_heads * self.head_dim
        for li, layer in enumerate(self.layers):
            x = F.rms_norm(h_N_E, (h_N_E.shape[-1],), layer.in_norm, self.eps)
            q, k, v = layer.qkv(x, masks).split((hd, kvd, kvd), dim=-1)
            q = _rotate(q.view(n, self.heads, self.head_dim), cos_N_1_D, sin_N_1_D)
            k = _rotate(k.view(n, self.kv_heads, self.head_dim), cos_N_1_D, sin_N_1_D)
            h_N_E = h_N_E + layer.o(attend(li, q, k, v.view(n, self.kv_heads, self.head_dim)), masks)
            x = F.rms_norm(h_N_E, (h_N_E.shape[-1],), layer.post_norm, self.eps)
            gate, up = layer.gate_up(x, masks).chunk(2, dim=-1)
            h_N_E = h_N_E + layer.down(F.silu(gate) * up, masks)
        return F.rms_norm(h_N_E, (h_N_E.shape[-1],), self.norm, self.eps)


def _stack_group(group: _Group, found, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Side-by-side A and block-diagonal B for a group's members (zeros where a member has no LoRA)."""
    w = group.weight
    a_kR_in = w.new_zeros((len(group.names) * rank, w.shape[1]))
    b_out_kR = w.new_zeros((w.shape[0], len(group.names) * rank))
    row = 0
    for i, (f, size) in enumerate(zip(found, group.sizes, strict=True)):
        if f is not None:
            a_kR_in[i * rank:(i + 1) * rank] = f[0]
            b_out_kR[row:row + size, i * rank:(i + 1) * rank] = f[1]
        row += size
    return a_kR_in, b_out_kR
