"""Fan-out: a job mapped over items, in this process's threads or in other processes.

A stage fans out through a ``Mapper``: ``mapper(fn, items)`` yields ``(i, fn(items[i]))``
as each job finishes (completion order), so the caller records a result the
moment it is known (a journal line) and a killed run loses only what was in
flight.

- ``ThreadMapper`` (the default of every stage) runs the jobs in a thread pool
  of this process; ``fn`` may close over live objects (a sandbox pool, an
  engine client).
- A mapper that leaves the process (``portable = True``: ``ProcessMapper``
  here, the flows' Prefect mapper on Dask or Ray workers) takes only what
  can travel as data: a module-level function (or a ``functools.partial`` of
  one over data) and items that plain ``pickle`` can write. ``check_portable``
  refuses anything else at once, by name: a job that captured a live object
  fails loudly instead of running on a copy of it.

A portable job builds the live services it needs in the process that runs it,
from the data it carries (``RunServices``, a config), and keeps them for the
next job there: ``per_process(kind, key, build)``. They are closed when a job
of the same kind brings another key (the next cycle's config) and when the
process exits; a process killed before that leaves sandbox containers that
the next pool to start on the machine removes (their owner is gone).
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from typing import Any, Protocol, TypeVar

from mindforge.errors import MindForgeError

T = TypeVar("T")
R = TypeVar("R")


class FanoutError(MindForgeError):
    pass


class Mapper(Protocol):
    """``fn`` over ``items``: ``(index, result)`` pairs in completion order; the first job error is raised."""

    portable: bool  # the jobs run in other processes: data in, data out (see the module doc)
    width: int  # jobs that run at once (how finely a caller splits work)

    def __call__(self, fn: Callable[[Any], R], items: Sequence[Any]) -> Iterator[tuple[int, R]]: ...


def map_ordered(mapper: Mapper, fn: Callable[[Any], R], items: Sequence[Any]) -> list[R]:
    """Every result, in the order of ``items``."""
    out: dict[int, R] = dict(mapper(fn, items))
    return [out[i] for i in range(len(items))]


def chunks(items: Sequence[T], n: int) -> list[list[T]]:
    """``items`` in at most ``n`` contiguous, nearly equal chunks (order kept; none empty)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return [c for c in out if c]


def _name(fn: Callable[..., Any]) -> str:
    target = fn.func if isinstance(fn, functools.partial) else fn
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def check_portable(fn: Callable[..., Any], items: Sequence[Any] = ()) -> None:
    """Raise ``FanoutError`` unless ``fn`` and ``items`` can run in another process as data.

    Plain ``pickle`` is the test: it writes a module-level function by name and
    refuses lambdas, closures, locks, sockets and open files, where cloudpickle
    (what Dask and Ray use) would copy a closure and its captured objects.
    """
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname or not getattr(target, "__module__", None):
        raise FanoutError(f"{_name(fn)} cannot run in another process: only a module-level function travels "
                          f"(what it needs must come in its arguments, as data)")
    for what, obj in (("job", fn), *((f"item {i}", it) for i, it in enumerate(items))):
        try:
            pickle.dumps(obj)
        except Exception as exc:  # noqa: BLE001 - every pickling failure means the same thing here
            raise FanoutError(f"{what} of {_name(fn)} cannot leave this process: {type(exc).__name__}: {exc}") \
                from None


def _drain(ex: Executor, fn: Callable[[Any], R], items: Sequence[Any]) -> Iterator[tuple[int, R]]:
    try:
        futures = {ex.submit(fn, item): i for i, item in enumerate(items)}
        for f in as_completed(futures):
            if f.exception() is not None:
                # Jobs that already finished are handed over before the error surfaces, so the caller
                # keeps (and stores) every result that exists.
                for g in [g for g in futures if g.done() and not g.cancelled() and g.exception() is None]:
                    yield futures.pop(g), g.result()
            yield futures.pop(f), f.result()
    except BaseException:
        # A job's error, Ctrl-C or a caller that stopped reading: do not wait for jobs blocked on a
        # service; the caller's services close next, which ends them.
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown()


class ThreadMapper:
    """Jobs in a thread pool of this process (each call its own pool)."""

    portable = False

    def __init__(self, workers: int = 8):
        self.width = max(1, workers)

    def __call__(self, fn: Callable[[Any], R], items: Sequence[Any]) -> Iterator[tuple[int, R]]:
        items = list(items)
        if not items:
            return iter(())
        return _drain(ThreadPoolExecutor(min(self.width, len(items))), fn, items)


class ProcessMapper:
    """Jobs in fresh worker processes (``spawn``: nothing of this process is inherited but the data sent)."""

    portable = True

    def __init__(self, workers: int = 2):
        self.width = max(1, workers)

    def __call__(self, fn: Callable[[Any], R], items: Sequence[Any]) -> Iterator[tuple[int, R]]:
        items = list(items)
        check_portable(fn, items)
        if not items:
            return iter(())
        ex = ProcessPoolExecutor(min(self.width, len(items)), mp_context=multiprocessing.get_context("spawn"))
        return _drain(ex, fn, items)


# ---------------------------------------------------------------------- live services per process
_HELD: dict[str, tuple[str, Any, ExitStack]] = {}  # kind -> (key, value, what closes it)
_HOLDING = threading.Lock()


def per_process(kind: str, key: str, build: Callable[[ExitStack], T]) -> T:
    """The object ``build`` made for ``key`` in this process, made on first use and kept.

    One is kept per ``kind``: a new key closes the previous object of that kind
    (its ``ExitStack``) before building. Jobs of one kind that run at once in
    this process share the object (it must be thread-safe, as a sandbox pool is).
    """
    with _HOLDING:
        held = _HELD.get(kind)
        if held is not None and held[0] == key:
            return held[1]
        if held is not None:
            del _HELD[kind]
            held[2].close()
        stack = ExitStack()
        try:
            value = build(stack)
        except BaseException:
            stack.close()
            raise
        _HELD[kind] = (key, value, stack)
        return value


@atexit.register
def close_per_process() -> None:
    """Close every object ``per_process`` holds (at exit; tests call it too)."""
    with _HOLDING:
        held = list(_HELD.values())
        _HELD.clear()
    for _, _, stack in held:
        stack.close()
