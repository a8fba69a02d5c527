"""A bound on requests in flight that holds across threads, each with its own event loop.

A stage scores work in several threads at once (the eval's shards, Discovery's
candidates), and each thread runs its harness turns in an event loop of its
own, so an ``asyncio.Semaphore`` bounds one call only: two eval shards of 32
each kept 64 requests in flight, and both drained together at every shard's
end, leaving the engine's batch empty while their last answers finished.

One ``InFlight`` shared by every call keeps the bound whole, and serves the
calls in the order they began (``line()``): the oldest call's turns go first,
younger calls fill the places it leaves, so calls finish one after another
(an eval shard is stored, and verified, while the next ones still generate)
instead of together, and the batch stays full while any call has turns
waiting. Within a call, turns go in the order they ask.

A waiter parks an ``asyncio.Future`` of its own loop; a release hands its slot
to the first waiter through that loop's ``call_soon_threadsafe`` (no thread
blocks, and a waiter cancelled as it was handed a slot passes it on).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading


class InFlight:
    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"in-flight limit must be at least 1, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._busy = 0
        # (call order, arrival, loop, future): the smallest is served first
        self._waiters: list[tuple[int, int, asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._arrivals = itertools.count()
        self._calls = itertools.count()

    @property
    def busy(self) -> int:
        return self._busy

    def line(self) -> Line:
        """A place in the order of calls: its turns go after those of every call that began before it."""
        with self._lock:
            return Line(self, next(self._calls))

    async def acquire(self, order: int = 0) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._busy < self.limit and not self._waiters:
                self._busy += 1
                return
            waiter = loop.create_future()
            entry = (order, next(self._arrivals), loop, waiter)
            heapq.heappush(self._waiters, entry)
        try:
            await waiter  # resolved with the slot already counted as ours
        except asyncio.CancelledError:
            with self._lock:
                granted = entry not in self._waiters  # handed a slot as we were cancelled: give it on
                if not granted:
                    self._waiters.remove(entry)
                    heapq.heapify(self._waiters)
            if granted:
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                _, _, loop, waiter = heapq.heappop(self._waiters)
                if not loop.is_closed():
                    # the slot passes straight to the waiter: ``busy`` stays as it is
                    loop.call_soon_threadsafe(_grant, waiter)
                    return
            self._busy -= 1


class Line:
    """One call's place in an ``InFlight``: ``async with line:`` holds a slot for one turn."""

    def __init__(self, gate: InFlight, order: int):
        self.gate, self.order = gate, order

    async def __aenter__(self) -> Line:
        await self.gate.acquire(self.order)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.gate.release()


def _grant(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
