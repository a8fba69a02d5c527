"""Engine counters in the Prometheus text exposition format (version 0.0.4).

Written by the scheduler thread, read by the HTTP thread. Every update is a
single attribute store of a Python number, so a scrape sees each value
whole; a scrape racing a step may see one counter a step ahead of another,
which Prometheus tolerates.

Throughput is given twice: as counters (``decode_seconds_total`` over
``decode_steps_total`` is the time a step takes since start, and so on) for
a scraper that takes rates itself, and as gauges over the last
``WINDOW_S`` seconds (tokens/s, mean decode batch, seconds a step) for a
person reading ``/metrics`` once.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

PREFIX = "mindforge_engine"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

_COUNTERS = {
    "requests_total": "Completion requests admitted.",
    "request_errors_total": "Requests that ended in an error inside the engine.",
    "prompt_tokens_total": "Prompt tokens of admitted requests.",
    "generated_tokens_total": "Tokens sampled, over every choice.",
    "prefill_tokens_total": "Prompt tokens run through the model (not taken from the prefix cache).",
    "prefix_cache_hits_total": "Prefills that reused a cached prefix.",
    "prefix_cache_misses_total": "Prefills that found no cached prefix.",
    "prefill_tokens_saved_total": "Prompt tokens taken from the prefix cache, or from an identical prompt's "
                                  "prefill, instead of recomputed.",
    "prefill_shared_total": "Requests prefilled together with an identical one (same adapter and prompt) "
                            "admitted beside it.",
    "decode_steps_total": "Batched decode steps.",
    "decode_seconds_total": "Wall time spent in decode steps (forward, sampling and bookkeeping).",
    "prefill_seconds_total": "Wall time spent in batched prefills.",
    "prefill_batches_total": "Batched prefills (requests_total over this is the mean number of prompts a prefill).",
    "batch_rebuilds_total": "Copies of the whole decode batch's keys/values (rows joined that did not fit in the "
                            "places of rows that left, or a quarter of the rows had left).",
    "request_seconds_total": "Wall time from arrival to answer, summed over requests (callers subtract it "
                             "from their own time to measure their overhead).",
}
_GAUGES = {
    "running_sequences": "Sequences in the decode batch.",
    "waiting_requests": "Requests queued for prefill.",
    "prefix_cache_tokens": "Tokens held by the prefix cache.",
    "prefix_cache_entries": "Entries in the prefix cache.",
    "adapters_loaded": "LoRA adapters being served.",
    "generation_tokens_per_second": "Tokens sampled per second over the last window (prefill and decode).",
    "mean_decode_batch": "Mean sequences per decode step over the last window.",
    "decode_step_seconds": "Mean wall time of a decode step over the last window.",
}
WINDOW_S = 10.0


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


class Window:
    """Decode steps of the last ``span_s`` seconds: ``(end time, rows, seconds)``, with running sums."""

    def __init__(self, span_s: float = WINDOW_S):
        self.span_s = span_s
        self.steps: deque[tuple[float, int, float]] = deque()
        self.rows = 0
        self.seconds = 0.0

    def add(self, now: float, rows: int, seconds: float) -> None:
        self.steps.append((now, rows, seconds))
        self.rows += rows
        self.seconds += seconds
        self.expire(now)

    def expire(self, now: float) -> None:
        while self.steps and self.steps[0][0] < now - self.span_s:
            _, rows, seconds = self.steps.popleft()
            self.rows -= rows
            self.seconds -= seconds


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self.gauges: dict[str, float] = dict.fromkeys(_GAUGES, 0)
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.window = Window()
        self._tokens = Window()  # every sampled token (first tokens at prefill too), for tokens/s

    def inc(self, name: str, amount: float = 1) -> None:
        self.counters[name] += amount
        if name == "generated_tokens_total":
            self._tokens.add(time.monotonic(), int(amount), 0.0)

    def decode_step(self, rows: int, seconds: float) -> None:
        """Record one decode step of ``rows`` sequences that took ``seconds``."""
        self.inc("decode_steps_total")
        self.inc("decode_seconds_total", seconds)
        self.inc("generated_tokens_total", rows)
        self.batch_size.observe(rows)
        self.window.add(time.monotonic(), rows, seconds)

    def update_rates(self) -> None:
        """Refresh the windowed gauges (the scheduler calls this every loop, idle or not)."""
        now = time.monotonic()
        self.window.expire(now)
        self._tokens.expire(now)
        steps = len(self.window.steps)
        self.set("generation_tokens_per_second", self._tokens.rows / self.window.span_s)
        self.set("mean_decode_batch", self.window.rows / steps if steps else 0)
        self.set("decode_step_seconds", self.window.seconds / steps if steps else 0)

    def set(self, name: str, value: float) -> None:
        self.gauges[name] = value

    def render(self) -> str:
        lines: list[str] = []
        for name, help_text in _COUNTERS.items():
            lines += [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} counter",
                      f"{PREFIX}_{name} {_num(self.counters[name])}"]
        for name, help_text in _GAUGES.items():
            lines += [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} gauge",
                      f"{PREFIX}_{name} {_num(self.gauges[name])}"]
        hist = self.batch_size
        name = f"{PREFIX}_batch_size"
        lines += [f"# HELP {name} Sequences per decode step.", f"# TYPE {name} histogram"]
        for bound, count in zip(hist.buckets, hist.counts, strict=True):
            lines.append(f'{name}_bucket{{le="{_num(bound)}"}} {count}')
        lines += [f'{name}_bucket{{le="+Inf"}} {hist.count}', f"{name}_sum {_num(hist.total)}",
                  f"{name}_count {hist.count}"]
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name (with labels) to value; for tests and benchmarks reading ``/metrics``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
