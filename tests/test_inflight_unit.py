"""The in-flight bound shared by calls in several threads, each with its own event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mindforge.inflight import InFlight


def test_one_bound_holds_across_threads_and_hands_slots_over_in_order() -> None:
    gate = InFlight(3)
    lock = threading.Lock()
    now = {"busy": 0, "most": 0}
    finished: list[str] = []

    async def turn(line, name: str, seconds: float) -> None:
        async with line:
            with lock:
                now["busy"] += 1
                now["most"] = max(now["most"], now["busy"])
            await asyncio.sleep(seconds)
            with lock:
                now["busy"] -= 1
                finished.append(name)

    def shard(prefix: str, seconds: float) -> None:  # like an eval shard: its own loop, in its own thread
        async def every() -> None:
            line = gate.line()
            await asyncio.gather(*(turn(line, f"{prefix}{i}", seconds) for i in range(5)))

        asyncio.run(every())

    threads = [threading.Thread(target=shard, args=(p, s)) for p, s in (("a", 0.01), ("b", 0.02))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(finished) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])
    assert now["most"] == 3  # the bound was reached and never passed, though each shard had 5 turns
    assert gate.busy == 0


def test_the_call_that_began_first_is_served_first() -> None:
    """Two calls' turns wait for one slot: the older call's go first, whatever order they asked in."""
    gate = InFlight(1)
    served: list[str] = []

    async def main() -> None:
        older, younger = gate.line(), gate.line()
        await gate.acquire()  # the slot is taken: everyone below waits

        async def turn(line, name: str) -> None:
            async with line:
                served.append(name)

        tasks = [asyncio.create_task(turn(younger, "young-1")), asyncio.create_task(turn(older, "old-1")),
                 asyncio.create_task(turn(younger, "young-2")), asyncio.create_task(turn(older, "old-2"))]
        await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert served == ["old-1", "old-2", "young-1", "young-2"]
    assert gate.busy == 0


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    gate = InFlight(1)

    async def main() -> list[str]:
        got: list[str] = []
        await gate.acquire()
        waiting = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0)

        async def later() -> None:
            async with gate.line():
                got.append("later")

        after = asyncio.create_task(later())
        await asyncio.sleep(0)
        waiting.cancel()
        gate.release()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(after, 1)
        return got

    assert asyncio.run(main()) == ["later"]
    assert gate.busy == 0


def test_a_slot_released_in_another_thread_wakes_the_waiter() -> None:
    gate = InFlight(1)
    woke: list[float] = []

    async def main() -> None:
        await gate.acquire()
        threading.Timer(0.05, gate.release).start()
        t0 = time.monotonic()
        await asyncio.wait_for(gate.acquire(), 2)
        woke.append(time.monotonic() - t0)
        gate.release()

    asyncio.run(main())
    assert woke and woke[0] >= 0.04 and gate.busy == 0
    with pytest.raises(ValueError, match="at least 1"):
        InFlight(0)
