"""Engine counters in the Prometheus text exposition format (version 0.0.4).

Written by the scheduler thread, read by the HTTP thread. Every update is a
single attribute store of a Python number, so a scrape sees each value
whole; a scrape racing a step may see one counter a step ahead of another,
which Prometheus tolerates.
"""

from __future__ import annotations

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
    "prefill_tokens_saved_total": "Prompt tokens taken from the prefix cache instead of recomputed.",
    "decode_steps_total": "Batched decode steps.",
    "request_seconds_total": "Wall time from arrival to answer, summed over requests (callers subtract it "
                             "from their own time to measure their overhead).",
}
_GAUGES = {
    "running_sequences": "Sequences in the decode batch.",
    "waiting_requests": "Requests queued for prefill.",
    "prefix_cache_tokens": "Tokens held by the prefix cache.",
    "prefix_cache_entries": "Entries in the prefix cache.",
    "adapters_loaded": "LoRA adapters being served.",
}


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


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self.gauges: dict[str, float] = dict.fromkeys(_GAUGES, 0)
        self.batch_size = Histogram(BATCH_BUCKETS)

    def inc(self, name: str, amount: float = 1) -> None:
        self.counters[name] += amount

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
