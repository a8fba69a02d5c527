"""Where a decode step of the embedded engine spends its time, in-process, on the real default model.

Three measurements, each printed as milliseconds a step:

- ``step``: ``EngineModel.decode`` (the fused forward the engine serves with)
  with the four route adapters mixed in the batch, for each batch size B and
  cached length K, in each dtype asked for (median of ``--rounds``);
- ``weights``: the weight products alone, every layer's weights distinct so
  that they come from memory as in a real forward, with and without the
  output head: the floor no removal of overhead can go under;
- ``attention``: the decode attention over K cached tokens in all layers.

fp32 is what the engine serves (the trainer's dtype, for logprob parity);
bf16 is shown for what it would buy. Step times on a shared VM vary by up to
about 20% between identical runs: compare within one run.

    .venv/bin/python benchmarks/decode_step.py [--shapes 1x300,32x300,32x600,64x300] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mindforge.engine import kv
from mindforge.engine.decoder import decode_attention
from mindforge.engine.model import EngineModel
from mindforge.engine.registry import init_adapters, resolve_model
from mindforge.settings import load_settings


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def step_ms(em: EngineModel, slots: list[str], b: int, k: int, rounds: int) -> float:
    g = em.geometry
    shape = (b, g.kv_heads, k + kv.HEADROOM, g.head_dim)
    layers = [kv.SlabLayer(torch.randn(shape, dtype=em.dtype), torch.randn(shape, dtype=em.dtype), k)
              for _ in range(g.num_layers)]
    batch = kv.BatchKV(layers, [k] * b)
    rows = [slots[i % len(slots)] for i in range(b)]

    def one() -> None:
        for layer in layers:  # every round decodes the same column
            layer.length = k
            layer._refresh()
        em.decode([100] * b, batch, rows)

    return median_ms(one, rounds)


def weights_ms(em: EngineModel, b: int, rounds: int) -> tuple[float, float]:
    """(all weight products, the output head's share) with this model's shapes and fresh weights a layer."""
    layer0 = em.fused.layers[0]
    shapes = [tuple(group.weight.shape) for group in (layer0.qkv, layer0.o, layer0.gate_up, layer0.down)]
    weights = [[torch.randn(s, dtype=em.dtype) for s in shapes] for _ in em.fused.layers]
    head = torch.randn(tuple(em.fused.lm_head.shape), dtype=em.dtype)
    inputs = {s[1]: torch.randn(b, s[1], dtype=em.dtype) for s in shapes}

    def layers_only() -> None:
        for ws in weights:
            for w in ws:
                F.linear(inputs[w.shape[1]], w)

    def with_head() -> None:
        layers_only()
        F.linear(inputs[head.shape[1]], head)

    total = median_ms(with_head, rounds)
    return total, total - median_ms(layers_only, rounds)


def attention_ms(em: EngineModel, b: int, k: int, rounds: int) -> float:
    f = em.fused
    g = f.heads // f.kv_heads
    shape = (b, f.kv_heads, k + kv.HEADROOM, f.head_dim)
    slabs = [(torch.randn(shape, dtype=em.dtype), torch.randn(shape, dtype=em.dtype)) for _ in f.layers]
    q = torch.randn(b, f.kv_heads, g, f.head_dim, dtype=em.dtype)
    bias = torch.zeros((b, 1, 1, k), dtype=em.dtype)

    def one() -> None:
        for keys, values in slabs:
            decode_attention(q, keys[:, :, :k], values[:, :, :k], bias, f.scale)

    return median_ms(one, rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x300,32x300,32x600,64x300", help="BxK pairs: rows, cached tokens")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]
    settings = load_settings()
    model = resolve_model(settings.model, settings)
    adapters = init_adapters(model, Path(tempfile.mkdtemp(prefix="mf-decode-")))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms a step (tok/s)")
    print(f"{'dtype':9s} {'B':>3s} {'K':>4s} {'step':>16s} {'weights':>9s} {'of it head':>10s} {'attention':>9s}")
    for name in args.dtypes.split(","):
        em = EngineModel(model, dtype=getattr(torch, name))
        if em.fused is None:
            raise SystemExit(f"{model}: the fused forward does not cover this model; nothing to measure")
        slots = [em.load_adapter(p) for p in adapters.values()]
        for b, k in shapes:
            step = step_ms(em, slots, b, k, args.rounds)
            weights, head = weights_ms(em, b, args.rounds)
            attn = attention_ms(em, b, k, args.rounds)
            print(f"{name:9s} {b:3d} {k:4d} {step:7.1f} ({b / step * 1e3:6.1f}) {weights:9.1f} {head:10.1f} "
                  f"{attn:9.1f}", flush=True)


if __name__ == "__main__":
    main()
