"""The task runner for a flow's fan-out, chosen by name.

``thread`` (default) runs mapped tasks in a local thread pool; ``dask`` and
``ray`` hand them to a cluster through the ``prefect-dask`` / ``prefect-ray``
integrations, installed only where a cluster is used. Options go to the
runner as they are (``{"address": "tcp://scheduler:8786"}`` for an existing
Dask cluster, ``{"address": "ray://head:10001"}`` for Ray).
"""

from __future__ import annotations

from typing import Any

from mindforge.errors import InputError


def make_task_runner(kind: str = "thread", max_workers: int = 2, options: dict[str, Any] | None = None) -> Any:
    options = dict(options or {})
    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=options.pop("max_workers", max_workers))
    try:
        if kind == "dask":
            from prefect_dask import DaskTaskRunner

            return DaskTaskRunner(**options)
        if kind == "ray":
            from prefect_ray import RayTaskRunner

            return RayTaskRunner(**options)
    except ImportError:
        raise InputError("cycle parameters", "/task_runner",
                         f"{kind} needs the prefect-{kind} package on the worker (pip install prefect-{kind})") from None
    raise InputError("cycle parameters", "/task_runner", f"unknown task runner {kind!r}; expected thread, dask or ray")
