"""A bound on requests in flight that holds across threads, each with its own event loop.

A stage scores work in several threads at once (the eval's shards, Discovery's
candidates), and each thread runs its harness turns in an event loop of its
own, so an ``asyncio.Semaphore`` bounds one call only: two shards of 32 each
kept 64 requests in flight, and both drained together at every shard's end,
leaving the engine's batch empty while their last answers finished. One
``InFlight`` shared by every call keeps the bound whole: when one shard's turns
run out, another's waiting turns take their places at once.

A waiter parks an ``asyncio.Future`` of its own loop; a release hands its slot
to the oldest waiter through that loop's ``call_soon_threadsafe`` (no thread
blocks, and a cancelled waiter passes its slot on).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class InFlight:
    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"in-flight limit must be at least 1, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._busy = 0
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()

    @property
    def busy(self) -> int:
        return self._busy

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._busy < self.limit and not self._waiters:
                self._busy += 1
                return
            waiter = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter  # resolved with the slot already counted as ours
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove((loop, waiter))
                    granted = False
                except ValueError:  # the slot was handed over as we were cancelled: give it on
                    granted = True
            if granted:
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                if not loop.is_closed():
                    # the slot passes straight to the waiter: ``busy`` stays as it is
                    loop.call_soon_threadsafe(_grant, waiter)
                    return
            self._busy -= 1

    async def __aenter__(self) -> InFlight:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _grant(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
