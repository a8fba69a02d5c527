"""A bounded prefix key/value cache, least recently used out first, sized in tokens.

Entries are keyed by an adapter *slot*, not by the adapter's public name:
every load of an adapter gets a fresh slot, so a name that is unloaded and
loaded again (or a new name) never sees keys/values another set of weights
computed. Within a slot an entry is a token sequence and its keys/values;
a lookup returns the longest common prefix with any entry of that slot.

Entries subsume each other: storing a sequence drops the slot's entries that
are prefixes of it, and storing a prefix of an existing entry only refreshes
that entry. A harness turn that extends the previous turn's prompt and answer
therefore keeps one entry per conversation, growing turn by turn.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from mindforge.engine.kv import RowKV


@dataclass
class _Entry:
    slot: Hashable
    ids: np.ndarray
    kv: RowKV


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class PrefixCache:
    """LRU over (slot, token sequence) entries; ``max_tokens`` bounds the tokens held in total."""

    def __init__(self, max_tokens: int):
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_id = 0
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, slot: Hashable, ids: Sequence[int], max_len: int | None = None) -> tuple[RowKV | None, int]:
        """The longest cached prefix of ``ids`` for ``slot`` (at most ``max_len`` tokens) and its length."""
        want = np.asarray(ids, dtype=np.int64)
        limit = len(want) if max_len is None else min(max_len, len(want))
        best_key, best_len = None, 0
        for key, entry in self._entries.items():
            if entry.slot != slot:
                continue
            n = min(common_prefix(entry.ids, want), limit)
            if n > best_len:
                best_key, best_len = key, n
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key].kv.prefix(best_len), best_len

    def insert(self, slot: Hashable, ids: Sequence[int], kv: RowKV) -> bool:
        """Store ``ids`` with their keys/values (``kv.length == len(ids)``); False when it cannot fit."""
        arr = np.asarray(ids, dtype=np.int64)
        if kv.length != len(arr):
            raise ValueError(f"kv holds {kv.length} tokens for {len(arr)} ids")
        if len(arr) == 0 or len(arr) > self.max_tokens:
            return False
        for key, entry in list(self._entries.items()):
            if entry.slot != slot:
                continue
            shared = common_prefix(entry.ids, arr)
            if shared == len(arr):  # already covered by a longer (or equal) entry
                self._entries.move_to_end(key)
                return True
            if shared == len(entry.ids):  # the new sequence extends this one
                self._remove(key)
        key = self._next_id
        self._next_id += 1
        self._entries[key] = _Entry(slot, arr, kv)
        self.tokens += len(arr)
        while self.tokens > self.max_tokens:
            self._remove(next(iter(self._entries)))
        return True

    def drop_slot(self, slot: Hashable) -> int:
        """Forget every entry of ``slot``; returns how many tokens were freed."""
        keys = [k for k, e in self._entries.items() if e.slot == slot]
        before = self.tokens
        for key in keys:
            self._remove(key)
        return before - self.tokens

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key)
        self.tokens -= len(entry.ids)
