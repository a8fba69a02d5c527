"""Continuous batching: one thread owns the model and interleaves prefills with decode steps.

Loop: take new work from the queue (requests and adapter loads/unloads),
prefill the admitted requests together in one batched, chunked prefill (each
reusing the longest prefix the prefix cache holds for its adapter slot),
then run one decode step over every running choice, adapters mixed in the
batch. A finished choice leaves the batch before the next step and its
whole sequence (prompt and answer) goes into the prefix cache, so the next
turn of the same conversation prefills only its new tokens.

A request that arrives while others decode waits at most one decode step
plus the prefill it is admitted with (``prefill_budget`` prompt tokens
bound how much prefill one loop iteration takes on). ``n`` choices share one prefill: the
prompt's keys/values are copied into ``n`` rows when they join. So do requests admitted together
with the same adapter and the same prompt: a stage's G samples of one task (each its own session
and seed) arrive together, and the prefix cache only helps a request admitted after the first
one's prefill.

Adapter loads and unloads run on this thread between steps; an unloaded
name disappears for new requests at once, and its weights and cache
entries go when no running choice uses them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mindforge.engine import kv
from mindforge.engine.metrics import Metrics
from mindforge.engine.model import BASE_SLOT, EngineModel, PrefillJob
from mindforge.engine.prefix_cache import PrefixCache
from mindforge.engine.sampling import draw_batch, make_generator
from mindforge.engine.sequence import GenerationRequest, GenerationResult, Row, UnknownModel
from mindforge.errors import MindForgeError
from mindforge.settings import ENGINE_MAX_BATCH

log = logging.getLogger(__name__)


class AdapterNameError(MindForgeError):
    pass


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    path: str
    slot: str


@dataclass
class _Admin:
    op: str  # "load" | "unload"
    name: str
    path: Path | None
    future: concurrent.futures.Future


def resolve(future: concurrent.futures.Future, value: object = None, error: BaseException | None = None) -> None:
    """Settle a future unless its caller gave up on it (a cancelled future refuses a result)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


class Scheduler:
    def __init__(self, model: EngineModel, base_name: str, *, max_batch: int = ENGINE_MAX_BATCH,
                 prefix_cache_tokens: int = 32768, prefill_budget: int = 2048, metrics: Metrics | None = None):
        self.model = model
        self.base_name = base_name
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.metrics = metrics or Metrics()
        self.cache = PrefixCache(prefix_cache_tokens)
        self.adapters: dict[str, AdapterInfo] = {}  # replaced whole on change: readers need no lock
        self._inbox: queue.Queue = queue.Queue()
        self._waiting: deque[GenerationRequest] = deque()
        self._rows: list[Row] = []
        self._batch: kv.BatchKV | None = None
        self._pending: dict[int, list[Row]] = {}  # id(request) -> its finished rows
        self._retired_slots: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-scheduler", daemon=True)

    # ------------------------------------------------------------ other threads
    def start(self) -> None:
        """Run the loop in a thread of its own (tests, in-process use)."""
        self._thread.start()

    def run(self, alive: Callable[[], bool] = lambda: True) -> None:
        """Run the loop in the calling thread until ``stop()`` or until ``alive()`` is false.

        ``mindforge engine serve`` runs it in the process's main thread and the HTTP server beside it:
        measured on the default model (2 cores), the same loop in a second thread took 30-35% longer a
        decode step (bf16, 32 rows: 80 -> 105-110 ms; one row: 41 -> 55 ms), whatever the OpenMP or
        malloc settings, except that actively spinning OpenMP workers made it twice as slow.
        """
        self._run(alive)

    def preload_adapter(self, name: str, path: Path) -> AdapterInfo:
        """Load an adapter before the loop runs (no other thread touches the model yet)."""
        if self._thread.is_alive():
            raise RuntimeError("the scheduler loop runs: load adapters through load_adapter()")
        return self._load(name, Path(path))

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def submit(self, request: GenerationRequest) -> concurrent.futures.Future:
        self._inbox.put(request)
        return request.future

    def load_adapter(self, name: str, path: Path) -> concurrent.futures.Future:
        admin = _Admin("load", name, Path(path), concurrent.futures.Future())
        self._inbox.put(admin)
        return admin.future

    def unload_adapter(self, name: str) -> concurrent.futures.Future:
        admin = _Admin("unload", name, None, concurrent.futures.Future())
        self._inbox.put(admin)
        return admin.future

    def known_models(self) -> list[str]:
        return [self.base_name, *self.adapters]

    # ------------------------------------------------------------ scheduler thread
    def _run(self, alive: Callable[[], bool] = lambda: True) -> None:
        while not self._stop.is_set() and alive():
            idle = not self._rows and not self._waiting
            self._drain(block=idle)
            try:
                joining = self._admit()
                self._regroup(joining)
                if self._rows:
                    self._step()
                self._retire_slots()
            except Exception as exc:  # one failed step must not kill the server
                log.exception("engine step failed")
                self._fail_running(exc)
            self._update_gauges()

    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while item is not None:
            if isinstance(item, _Admin):
                self._admin(item)
            else:
                self._waiting.append(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _admin(self, item: _Admin) -> None:
        try:
            resolve(item.future, self._load(item.name, item.path) if item.op == "load" else self._unload(item.name))
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            resolve(item.future, error=exc)

    def _load(self, name: str, path: Path | None) -> AdapterInfo:
        if not name or name == self.base_name or name in self.adapters:
            why = "is the base model's name" if name == self.base_name else "is already loaded" if name else "is empty"
            raise AdapterNameError(f"lora_name {name!r} {why}")
        slot = self.model.load_adapter(Path(path))
        info = AdapterInfo(name, str(path), slot)
        self.adapters = {**self.adapters, name: info}
        return info

    def _unload(self, name: str) -> AdapterInfo:
        if name not in self.adapters:
            raise UnknownModel(name, list(self.adapters))
        info = self.adapters[name]
        self.adapters = {k: v for k, v in self.adapters.items() if k != name}
        self._retired_slots.append(info.slot)
        return info

    def _retire_slots(self) -> None:
        busy = {r.slot for r in self._rows}
        for slot in [s for s in self._retired_slots if s not in busy]:
            self.cache.drop_slot(slot)
            self.model.delete_adapter(slot)
            self._retired_slots.remove(slot)

    def _admit(self) -> list[Row]:
        """Take the waiting requests that fit the batch and the prefill budget, and prefill them together.

        A request whose adapter and prompt are those of one already taken joins that one's prefill
        (it costs no budget).
        """
        jobs: list[tuple[list[GenerationRequest], object, PrefillJob]] = []
        same: dict[tuple[object, tuple[int, ...]], int] = {}  # (cache key, prompt) -> index in jobs
        budget = self.prefill_budget
        active = sum(r.finish_reason is None for r in self._rows)
        while self._waiting and budget > 0:
            req = self._waiting[0]
            if req.future.cancelled():
                self._waiting.popleft()
                continue
            if active and active + req.params.n > self.max_batch:
                break
            self._waiting.popleft()
            try:
                key = (self._slot_for(req.model)[1], tuple(req.prompt_ids))
                if key in same:
                    jobs[same[key]][0].append(req)
                    self._count_shared(req)
                else:
                    cache_key, job = self._prepare(req)
                    same[key] = len(jobs)
                    jobs.append(([req], cache_key, job))
                    budget -= len(job.ids) - job.start
            except Exception as exc:  # noqa: BLE001 - the request fails, the engine keeps serving
                self.metrics.inc("request_errors_total")
                resolve(req.future, error=exc)
                continue
            active += req.params.n
        return self._prefill(jobs) if jobs else []

    def _slot_for(self, name: str) -> tuple[str, object]:
        if name == self.base_name:
            return BASE_SLOT, BASE_SLOT
        info = self.adapters.get(name)
        if info is None:
            raise UnknownModel(name, self.known_models())
        return info.slot, info.slot

    def _prepare(self, req: GenerationRequest) -> tuple[object, PrefillJob]:
        """The request's slabs, starting with the longest prefix the cache holds for its adapter."""
        slot, cache_key = self._slot_for(req.model)
        ids = req.prompt_ids
        m = self.model
        geo = m.geometry
        prefix, p = self.cache.lookup(cache_key, ids, max_len=len(ids) - 1)
        self._count_request(len(ids))
        self.metrics.inc("prefix_cache_hits_total" if p else "prefix_cache_misses_total")
        self.metrics.inc("prefill_tokens_saved_total", p)
        self.metrics.inc("prefill_tokens_total", len(ids) - p)
        if prefix is not None:
            layers = kv.cache_from_prefix(prefix, len(ids))
        else:
            layers = kv.empty_cache(geo.num_layers, geo.kv_heads, geo.head_dim, len(ids), dtype=m.dtype,
                                    device=m.device)
        req.cached_tokens = p
        return cache_key, PrefillJob(list(ids), p, layers, slot)

    def _count_request(self, prompt_tokens: int) -> None:
        self.metrics.inc("requests_total")
        self.metrics.inc("prompt_tokens_total", prompt_tokens)

    def _count_shared(self, req: GenerationRequest) -> None:
        """A request that shares an identical request's prefill: all its prompt tokens are reused."""
        self._count_request(len(req.prompt_ids))
        self.metrics.inc("prefill_shared_total")
        self.metrics.inc("prefill_tokens_saved_total", len(req.prompt_ids))
        req.cached_tokens = len(req.prompt_ids)

    def _prefill(self, jobs: list[tuple[list[GenerationRequest], object, PrefillJob]]) -> list[Row]:
        """One batched prefill for ``jobs``, then each request's first token for each of its ``n`` choices."""
        m = self.model
        t0 = time.perf_counter()
        try:
            logits_J_V = m.prefill([job for _, _, job in jobs])
        except Exception as exc:
            log.exception("prefill failed")
            for reqs, _, _ in jobs:
                for req in reqs:
                    self.metrics.inc("request_errors_total")
                    resolve(req.future, error=exc)
            return []
        rows, which = [], []
        for j, (reqs, cache_key, job) in enumerate(jobs):
            prompt_kv = kv.row_from_slabs(job.layers)
            self.cache.insert(cache_key, job.ids, prompt_kv)
            for req in reqs:
                for i in range(req.params.n):
                    seed = None if req.params.seed is None else req.params.seed + i
                    rows.append(Row(req, i, job.slot, cache_key, make_generator(seed, m.device),
                                    prompt_kv=prompt_kv))
                    which.append(j)
        draws = draw_batch(logits_J_V[which], [r.params for r in rows], [r.generator for r in rows])
        for row, d in zip(rows, draws, strict=True):
            row.append(d, m.tokenizer, m.eos_ids, m.geometry.max_positions)
        elapsed = time.perf_counter() - t0
        for reqs, _, _ in jobs:
            for req in reqs:
                req.started_at, req.prefill_s = t0, elapsed
        self.metrics.inc("generated_tokens_total", len(rows))
        self.metrics.inc("prefill_seconds_total", elapsed)
        self.metrics.inc("prefill_batches_total")
        for r in rows:
            if r.finish_reason is not None:
                self._finish(r, None)
        return [r for r in rows if r.finish_reason is None]

    @staticmethod
    def _live(row: Row) -> bool:
        return row.finish_reason is None and not row.request.future.cancelled()

    def _regroup(self, joining: list[Row]) -> None:
        """Put the joining rows in the places of finished or abandoned ones; rebuild the slabs only when they
        do not fit there (``kv.place``).

        Rows that leave stay in place as dead rows (computed, never read)
        until a joiner takes their place, or, while none joins, until they are
        a quarter of the batch or no row is live: a rebuild copies every row's
        keys/values, which costs more than a decode step at a full batch, so
        one per departing row would cost more than the wasted rows do.
        """
        live = [self._live(r) for r in self._rows]
        keep = [i for i, ok in enumerate(live) if ok]
        dead = [i for i, ok in enumerate(live) if not ok]
        joining_kv = [r.prompt_kv for r in joining]
        if joining and self._batch is not None and kv.place(self._batch, dead, joining_kv):
            for i, r in zip(dead, joining):
                self._rows[i] = r
                r.prompt_kv = None
            kv.trim(self._batch, keep + dead[:len(joining)])
            return
        if not joining and (not dead or (keep and len(dead) * 4 <= len(self._rows))):
            if dead and self._batch is not None:
                kv.trim(self._batch, keep)  # the longest rows may have left
            return
        for r in joining:
            r.prompt_kv = None
        self._batch = kv.rebuild(self._batch, keep, joining_kv)
        self._rows = [self._rows[i] for i in keep] + joining
        self.metrics.inc("batch_rebuilds_total")

    def _step(self) -> None:
        m = self.model
        batch = self._batch
        rows = self._rows
        assert batch is not None and batch.size == len(rows)
        t0 = time.perf_counter()
        logits_B_V = m.decode([r.last_token for r in rows], batch, [r.slot for r in rows])
        batch.advance()
        draws = draw_batch(logits_B_V, [r.params for r in rows], [r.generator for r in rows])
        live, finished = 0, []
        for i, (row, d) in enumerate(zip(rows, draws, strict=True)):
            if not self._live(row):  # a dead row waiting for the next rebuild
                continue
            live += 1
            row.append(d, m.tokenizer, m.eos_ids, m.geometry.max_positions)
            if row.finish_reason is not None:
                finished.append(i)
        # counted before any caller is answered: a caller that reads the metrics sees its own last step
        self.metrics.decode_step(live, time.perf_counter() - t0)
        for i in finished:
            self._finish(rows[i], i)

    def _finish(self, row: Row, batch_index: int | None) -> None:
        """Cache the row's sequence (all but the last token have keys/values) and answer when all choices are in."""
        if batch_index is not None and self._batch is not None:
            seq = row.sequence[:-1]
            row_kv = self._batch.row(batch_index)
            if row_kv.length == len(seq):
                self.cache.insert(row.cache_key, seq, row_kv.clone())
        req = row.request
        done = self._pending.setdefault(id(req), [])
        done.append(row)
        if len(done) < req.params.n:
            return
        del self._pending[id(req)]
        if req.future.done():  # abandoned by its caller
            return
        m = self.model
        choices = [r.result(m.tokenizer, m.eos_ids) for r in sorted(done, key=lambda r: r.index)]
        result = GenerationResult(list(req.prompt_ids), choices, req.cached_tokens,
                                  queue_s=max(0.0, req.started_at - req.submitted_at), prefill_s=req.prefill_s,
                                  total_s=time.perf_counter() - req.submitted_at)
        self.metrics.inc("request_seconds_total", result.total_s)
        resolve(req.future, result)

    def _fail_running(self, exc: Exception) -> None:
        for row in self._rows:
            if not row.request.future.done():
                self.metrics.inc("request_errors_total")
                resolve(row.request.future, error=exc)
            self._pending.pop(id(row.request), None)
        self._rows, self._batch = [], None

    def _update_gauges(self) -> None:
        g = self.metrics.set
        g("running_sequences", sum(map(self._live, self._rows)))
        g("waiting_requests", len(self._waiting) + self._inbox.qsize())
        g("prefix_cache_tokens", self.cache.tokens)
        g("prefix_cache_entries", len(self.cache))
        g("adapters_loaded", len(self.adapters))
        self.metrics.update_rates()
