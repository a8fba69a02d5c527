"""The task runner for a flow's fan-out, chosen by name.

``thread`` (default) runs mapped tasks in a local thread pool; ``dask`` and
``ray`` hand them to a cluster through the ``prefect-dask`` / ``prefect-ray``
integrations, installed only where a cluster is used. Options go to the
runner as they are (``{"address": "tcp://scheduler:8786"}`` for an existing
Dask cluster, ``{"address": "ray://head:10001"}`` for Ray).
"""

from __future__ import annotations

import importlib
from typing import Any

from mindforge.errors import InputError

_CLUSTER = {"dask": ("prefect_dask", "DaskTaskRunner", "prefect-dask"),
            "ray": ("prefect_ray", "RayTaskRunner", "prefect-ray")}


def make_task_runner(kind: str = "thread", max_workers: int = 2, options: dict[str, Any] | None = None) -> Any:
    options = dict(options or {})
    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=options.pop("max_workers", max_workers))
    if kind not in _CLUSTER:
        raise InputError("cycle parameters", "/task_runner", f"unknown task runner {kind!r}; "
                         "expected thread, dask or ray")
    module, cls, package = _CLUSTER[kind]
    try:
        runner = getattr(importlib.import_module(module), cls)
    except ImportError:
        raise InputError("cycle parameters", "/task_runner",
                         f"{kind} needs the {package} package on the worker (pip install {package})") from None
    return runner(**options)
