"""A stage's fan-out as Prefect tasks on the flow's task runner (Dask or Ray workers in other processes).

On the default thread runner a stage keeps its own thread pool (``stage_mapper``
returns None). On any other runner it gets a ``TaskMapper``: every job of the
stage's ``Mapper`` (``mindforge.fanout``: a Discovery judgement, a chunk of
Expansion solves) is submitted as a ``fan-out`` task whose arguments are the
library's module-level job function and its data, so the runner can ship it
to a worker process; nothing of the flow's process goes with it. The task
returns the worker's pid with the result, so the flow can say where its
tasks ran.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from mindforge.fanout import check_portable

DEFAULT_WIDTH = 4  # jobs at once where the runner does not say


# Resuming is the stages' journals' job, not Prefect's cache: results are neither cached nor stored.
@task(name="fan-out", task_run_name="{label}", cache_policy=NO_CACHE, persist_result=False, log_prints=True)
def fan_out(label: str, fn: Callable[[Any], Any], item: Any) -> tuple[int, Any]:
    """One job of a stage's fan-out, in whatever process the task runner chose: (that pid, the result)."""
    return os.getpid(), fn(item)


class TaskMapper:
    """``mindforge.fanout.Mapper`` whose jobs are ``fan-out`` tasks on the running flow's task runner."""

    portable = True

    def __init__(self, width: int = DEFAULT_WIDTH):
        self.width = max(1, width)
        self.jobs = 0
        self.pids: set[int] = set()  # the processes the jobs ran in

    def __call__(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        items = list(items)
        check_portable(fn, items)  # refused here, by name, not half-way through on a worker
        target = fn.func if isinstance(fn, functools.partial) else fn
        name = getattr(target, "__name__", "job").replace("_", "-")
        futures = {fan_out.submit(f"{name}-{self.jobs + i}", fn, item): i
                   for i, item in enumerate(items)}
        self.jobs += len(items)
        return self._results(futures)

    def _results(self, futures: dict[Any, int]) -> Iterator[tuple[int, Any]]:
        for future in as_completed(list(futures)):
            pid, result = future.result()
            self.pids.add(pid)
            yield futures[future], result

    def facts(self) -> dict[str, Any]:
        return {"tasks": self.jobs, "processes": sorted(self.pids), "flow_process": os.getpid()}


def runner_width(runner: Any) -> int:
    """Jobs the runner runs at once: a Dask cluster's worker threads, else ``DEFAULT_WIDTH``."""
    client = getattr(runner, "_client", None)  # prefect-dask's started client
    try:
        return max(1, sum(client.nthreads().values())) if client is not None else DEFAULT_WIDTH
    except Exception:  # noqa: BLE001 - a width is a hint; a runner that cannot say gets the default
        return DEFAULT_WIDTH


def stage_mapper() -> TaskMapper | None:
    """The mapper for the running flow's stage: None (the stage's thread pool) on the thread runner."""
    ctx = FlowRunContext.get()
    runner = ctx.task_runner if ctx is not None else None
    if runner is None or isinstance(runner, ThreadPoolTaskRunner):
        return None
    return TaskMapper(runner_width(runner))
