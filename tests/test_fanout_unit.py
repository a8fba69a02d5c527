"""The fan-out seam: threads and processes give the same results; a job that cannot travel is refused by name."""

from __future__ import annotations

import functools
import os
import threading

import pytest

from mindforge.fanout import (
    FanoutError,
    ProcessMapper,
    ThreadMapper,
    check_portable,
    chunks,
    close_per_process,
    map_ordered,
    per_process,
)


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def scaled(factor: int, x: int) -> int:
    return factor * x


def boom(x: int) -> int:
    if x == 3:
        raise ValueError("job 3 failed")
    return x


def test_threads_and_processes_give_the_same_results_in_item_order() -> None:
    items = list(range(7))
    threads = map_ordered(ThreadMapper(3), square_and_pid, items)
    procs = map_ordered(ProcessMapper(2), square_and_pid, items)
    assert [r for r, _ in threads] == [r for r, _ in procs] == [x * x for x in items]
    assert {pid for _, pid in threads} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in procs}  # the jobs ran elsewhere
    # a partial of a module-level function over data travels too
    assert map_ordered(ProcessMapper(2), functools.partial(scaled, 10), [1, 2]) == [10, 20]


def test_results_stream_as_jobs_finish_with_their_index() -> None:
    got = list(ThreadMapper(2)(square_and_pid, [5, 6]))
    assert sorted(i for i, _ in got) == [0, 1] and {r[0] for _, r in got} == {25, 36}
    assert list(ThreadMapper(2)(square_and_pid, [])) == []


@pytest.mark.parametrize("mapper", [ThreadMapper(2), ProcessMapper(2)], ids=["threads", "processes"])
def test_a_job_error_is_raised_not_swallowed(mapper) -> None:
    with pytest.raises(ValueError, match="job 3 failed"):
        list(mapper(boom, range(5)))


def test_a_job_that_captured_a_live_object_fails_loudly_in_another_process() -> None:
    lock = threading.Lock()

    def uses_lock(x: int) -> int:  # a closure: fine in threads, where the lock lives
        with lock:
            return x

    assert map_ordered(ThreadMapper(2), uses_lock, [1, 2]) == [1, 2]
    with pytest.raises(FanoutError, match="only a module-level function travels"):
        list(ProcessMapper(2)(uses_lock, [1, 2]))
    with pytest.raises(FanoutError, match="only a module-level function travels"):
        list(ProcessMapper(2)(lambda x: x, [1]))
    with pytest.raises(FanoutError, match=r"job of .*scaled cannot leave this process: TypeError"):
        list(ProcessMapper(2)(functools.partial(scaled, lock), [1]))  # a live object bound as an argument
    with pytest.raises(FanoutError, match="item 1 of .*square_and_pid cannot leave this process"):
        check_portable(square_and_pid, [1, lock])


def test_chunks_keep_order_and_split_evenly() -> None:
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunks([1, 2], 5) == [[1], [2]]
    assert chunks([], 3) == []


def test_per_process_builds_once_a_key_and_closes_the_previous() -> None:
    closed: list[str] = []

    def build(name: str):
        def go(stack):
            stack.callback(closed.append, name)
            return object()
        return go

    try:
        a = per_process("unit", "k1", build("a"))
        assert per_process("unit", "k1", build("never")) is a and closed == []
        b = per_process("unit", "k2", build("b"))
        assert b is not a and closed == ["a"]
    finally:
        close_per_process()
    assert closed == ["a", "b"]
