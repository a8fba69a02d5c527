"""The progress bar every long command shows: one line on stderr with the stage's own log lines above it.

stderr, so that a command's ``--json`` stdout holds only its summary; with
``enabled=False`` (``--json``, or output that is not a terminal reading it)
the bar draws nothing and the log lines still go to stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class StageBar:
    """What a command hands its stage: ``log`` prints above the bar, ``update`` moves it."""

    def __init__(self, bar: Any, task: Any, prefix: str):
        self._bar, self._task, self._prefix = bar, task, prefix

    def log(self, message: str) -> None:
        self._bar.console.print(f"[{self._prefix}] {message}", highlight=False, markup=False, soft_wrap=True)

    def update(self, done: int, total: int | None, description: str | None = None) -> None:
        extra = {} if description is None else {"description": description}
        self._bar.update(self._task, completed=done, total=total, **extra)


@contextmanager
def stage_bar(prefix: str, unit: str, enabled: bool = True) -> Iterator[StageBar]:
    """A bar counting ``unit`` (candidates, tasks, steps) for the command named ``prefix``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(f"[bold]{prefix}[/] {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled)
    with bar:
        yield StageBar(bar, bar.add_task(unit, total=None), prefix)
