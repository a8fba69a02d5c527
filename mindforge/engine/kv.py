"""Key/value state of the running decode batch, kept in preallocated slabs.

transformers' ``DynamicLayer`` grows by ``torch.cat`` on every decode step,
which copies the whole cache once per token; at a batch of 8 and a few
hundred tokens that copy costs more than the matmuls. A ``SlabLayer`` writes
each step into spare capacity instead and hands attention a view.

Layout invariant (``BatchKV``): rows are left-padded. Row ``i`` holds its
``kv_len[i]`` real tokens in the last ``kv_len[i]`` of ``width`` columns; the
columns before them are padding that the attention mask hides. A decode step
appends one column for every row at once, so the invariant keeps holding.

A joining row takes the place of a row that left (``place``): its keys and
values are written right-aligned into that row's columns, and nothing else
moves. Leading columns that every live row pads are dropped by narrowing the
view (``trim``), not by copying. Only when that cannot be done (more joiners
than free rows, a joiner longer than the batch's width) are the slabs rebuilt
(``rebuild``): a copy of every row, which at 64 rows of ~700 tokens is 2.4 GB
of fp32 keys and values, longer than a decode step. Rebuilding on every join,
as the scheduler once did, cost more than the decode steps whenever requests
arrived one at a time.

Rows that left hold stale keys and values until a joiner takes their place:
finite numbers behind the mask, so no row ever reads NaN from padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

# Spare columns allocated beyond the current width when a slab is (re)built.
HEADROOM = 128


class SlabLayer(DynamicLayer):
    """One layer's keys and values in a buffer with spare columns; ``update`` writes in place."""

    def __init__(self, keys_B_H_C_D: torch.Tensor, values_B_H_C_D: torch.Tensor, length: int):
        super().__init__()
        self.buf_k = keys_B_H_C_D
        self.buf_v = values_B_H_C_D
        self.length = length
        self.device = keys_B_H_C_D.device
        self.is_initialized = True
        self._refresh()

    def _refresh(self) -> None:
        self.keys = self.buf_k[:, :, : self.length]
        self.values = self.buf_v[:, :, : self.length]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # born initialised

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        q = key_states.shape[-2]
        end = self.length + q
        if end > self.buf_k.shape[-2]:
            self._grow(end + HEADROOM)
        self.buf_k[:, :, self.length:end] = key_states
        self.buf_v[:, :, self.length:end] = value_states
        self.length = end
        self._refresh()
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        b, h, _, d = self.buf_k.shape
        new_k = self.buf_k.new_empty((b, h, capacity, d))
        new_v = self.buf_v.new_empty((b, h, capacity, d))
        new_k[:, :, : self.length] = self.buf_k[:, :, : self.length]
        new_v[:, :, : self.length] = self.buf_v[:, :, : self.length]
        self.buf_k, self.buf_v = new_k, new_v

    def trim(self, columns: int) -> None:
        """Drop the first ``columns`` (a narrower view of the same buffers: nothing is copied)."""
        self.buf_k = self.buf_k[:, :, columns:]
        self.buf_v = self.buf_v[:, :, columns:]
        self.length -= columns
        self._refresh()

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0


@dataclass(frozen=True)
class RowKV:
    """One sequence's keys/values: per layer ``(keys_1_H_T_D, values_1_H_T_D)``, no padding."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[-2]

    def prefix(self, n: int) -> RowKV:
        return RowKV(tuple((k[:, :, :n], v[:, :, :n]) for k, v in self.layers))

    def clone(self) -> RowKV:
        return RowKV(tuple((k.clone(), v.clone()) for k, v in self.layers))

    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.layers)


def empty_cache(num_layers: int, kv_heads: int, head_dim: int, capacity: int, *, dtype: torch.dtype,
                device: torch.device | str) -> list[SlabLayer]:
    """Layers for a single-row prefill with no cached prefix."""
    shape = (1, kv_heads, capacity, head_dim)
    return [SlabLayer(torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device), 0)
            for _ in range(num_layers)]


def cache_from_prefix(prefix: RowKV, capacity: int) -> list[SlabLayer]:
    """Single-row slabs starting with a copy of ``prefix`` (the prefix-cache entry stays untouched)."""
    layers = []
    n = prefix.length
    for k, v in prefix.layers:
        _, h, _, d = k.shape
        buf_k = k.new_empty((1, h, max(capacity, n), d))
        buf_v = v.new_empty((1, h, max(capacity, n), d))
        buf_k[:, :, :n] = k
        buf_v[:, :, :n] = v
        layers.append(SlabLayer(buf_k, buf_v, n))
    return layers


def as_cache(layers: Sequence[SlabLayer]) -> Cache:
    return Cache(layers=list(layers))


def row_from_slabs(layers: Sequence[SlabLayer], row: int = 0, start: int = 0, end: int | None = None) -> RowKV:
    """A view of one row's columns ``[start, end)`` (no copy)."""
    stop = layers[0].length if end is None else end
    return RowKV(tuple((layer.buf_k[row:row + 1, :, start:stop], layer.buf_v[row:row + 1, :, start:stop])
                       for layer in layers))


class BatchKV:
    """The decode batch's left-padded slabs plus each row's real length."""

    def __init__(self, layers: list[SlabLayer], kv_len: list[int]):
        self.layers = layers
        self.kv_len = kv_len

    @property
    def size(self) -> int:
        return len(self.kv_len)

    @property
    def width(self) -> int:
        return self.layers[0].length if self.layers else 0

    def row(self, i: int) -> RowKV:
        """Row ``i``'s real tokens (a view into the slab; clone it before the slab changes)."""
        w = self.width
        return row_from_slabs(self.layers, i, w - self.kv_len[i], w)

    def decode_inputs(self, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask ``[B, width+1]`` and position ids ``[B, 1]`` for one decode step."""
        w = self.width
        kv_len_B = torch.tensor(self.kv_len, dtype=torch.long, device=device)
        cols_W = torch.arange(w + 1, device=device)
        mask_B_W = (cols_W[None, :] >= (w - kv_len_B)[:, None]).long()
        return mask_B_W, kv_len_B[:, None]

    def advance(self) -> None:
        """Every row gained the column the last decode step wrote."""
        self.kv_len = [n + 1 for n in self.kv_len]


def place(batch: BatchKV, free: Sequence[int], joining: Sequence[RowKV]) -> bool:
    """Write ``joining`` into the rows ``free`` (rows that left), in place; False, with nothing written, when
    there are fewer free rows than joiners or a joiner is longer than the batch's width (then rebuild)."""
    w = batch.width
    if len(joining) > len(free) or any(r.length > w for r in joining):
        return False
    # a slab that grew during a decode step is an inference tensor: written to only in inference mode
    with torch.inference_mode():
        for i, r in zip(free, joining):
            n = r.length
            for layer, (k, v) in zip(batch.layers, r.layers, strict=True):
                layer.buf_k[i, :, w - n:w] = k[0]
                layer.buf_v[i, :, w - n:w] = v[0]
            batch.kv_len[i] = n
    return True


def trim(batch: BatchKV, live: Sequence[int]) -> None:
    """Drop the leading columns that every row of ``live`` pads (rows not in it may lose real columns)."""
    if not live or not batch.layers:
        return
    columns = batch.width - max(batch.kv_len[i] for i in live)
    if columns > 0:
        for layer in batch.layers:
            layer.trim(columns)


def rebuild(old: BatchKV | None, keep: Sequence[int], joining: Sequence[RowKV], headroom: int = HEADROOM) -> BatchKV:
    """A new batch: rows ``keep`` of ``old`` (in order), then ``joining``; trimmed to the longest row."""
    kept = [old.row(i) for i in keep] if old is not None else []
    rows = kept + list(joining)
    if not rows:
        return BatchKV([], [])
    lens = [r.length for r in rows]
    width = max(lens)
    template = rows[0].layers
    layers = []
    for li, (k0, v0) in enumerate(template):
        _, h, _, d = k0.shape
        buf_k = k0.new_zeros((len(rows), h, width + headroom, d))
        buf_v = v0.new_zeros((len(rows), h, width + headroom, d))
        for bi, r in enumerate(rows):
            k, v = r.layers[li]
            n = lens[bi]
            buf_k[bi, :, width - n:width] = k[0]
            buf_v[bi, :, width - n:width] = v[0]
        layers.append(SlabLayer(buf_k, buf_v, width))
    return BatchKV(layers, lens)
