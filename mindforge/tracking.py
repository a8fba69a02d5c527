"""Experiment tracking: scalars by step to TensorBoard, and to MLflow or W&B when asked.

``open_tracker(kinds, log_dir, run_name, purge_step)`` returns one ``Tracker``
that fans out to each kind named. TensorBoard is the default and needs no
service: event files under ``log_dir`` (``RUN_DIR/cycles/N/update/tensorboard``),
read by ``tensorboard --logdir`` or its ``EventAccumulator``. MLflow and W&B
are optional extras: used only when named in ``UpdateConfig.tracking`` and
installed; they read their own settings (``MLFLOW_TRACKING_URI``,
``WANDB_PROJECT``, ...) as their libraries document. Naming one that is not
installed is an error at start, not a silent skip.

A resumed Update opens TensorBoard with ``purge_step`` = the checkpoint's
step: events a killed attempt wrote for steps at or after it are discarded by
TensorBoard's readers, so every step shows once, with the resumed values.

Per cycle, ``write_cycle_curve`` puts a run's curve beside the steps: the
eval's pass@1 and routing (``RUN_DIR/tensorboard/eval``) and the router's
accuracy (``RUN_DIR/tensorboard/routing``), the step being the cycle. That
curve is a projection of what the run stored (each cycle's eval result, each
Update's ``router.json``), written again whole each time a cycle adds or
replaces a point: TensorBoard's ``purge_step`` discards every later step too,
so a rerun of cycle 0 would erase cycles 1 to N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from mindforge.errors import MindForgeError

TrackerKind = Literal["tensorboard", "mlflow", "wandb"]


class TrackingError(MindForgeError):
    pass


@runtime_checkable
class Tracker(Protocol):
    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a kill loses at most the step being written

    def close(self) -> None:
        self.writer.close()


class MLflowTracker:
    def __init__(self, run_name: str, params: Mapping[str, Any]):
        import mlflow

        self.mlflow = mlflow
        mlflow.start_run(run_name=run_name)
        mlflow.log_params({k: str(v) for k, v in params.items()})

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.mlflow.log_metrics(dict(scalars), step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class WandbTracker:
    def __init__(self, run_name: str, params: Mapping[str, Any]):
        import wandb

        self.run = wandb.init(name=run_name, config=dict(params))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """Several trackers as one."""

    def __init__(self, trackers: Sequence[Tracker]):
        self.trackers = list(trackers)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for t in self.trackers:
            t.log(step, scalars)

    def close(self) -> None:
        for t in self.trackers:
            t.close()


def open_tracker(kinds: Sequence[TrackerKind], log_dir: Path, run_name: str,
                 params: Mapping[str, Any] | None = None, purge_step: int | None = None) -> Trackers:
    params = params or {}
    out: list[Tracker] = []
    try:
        for kind in dict.fromkeys(kinds):
            if kind == "tensorboard":
                out.append(TensorBoardTracker(log_dir, purge_step=purge_step))
            elif kind == "mlflow":
                out.append(MLflowTracker(run_name, params))
            else:
                out.append(WandbTracker(run_name, params))
    except ImportError as exc:
        Trackers(out).close()
        raise TrackingError(f"tracking with {exc.name} was asked for but it is not installed "
                            f"(pip install {exc.name})") from exc
    return Trackers(out)


def cycle_log_dir(run_dir: Path, source: str) -> Path:
    """Where ``source`` (``eval``, ``routing``) keeps its per-cycle curve: one TensorBoard run each."""
    return Path(run_dir) / "tensorboard" / source


def write_cycle_curve(run_dir: Path, source: str, points: Mapping[int, Mapping[str, float]]) -> Path:
    """The whole per-cycle curve of ``source`` (cycle -> scalars), replacing the one written before."""
    import shutil
    import tempfile

    folder = cycle_log_dir(run_dir, source)
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{source}-", dir=folder.parent))
    tracker = TensorBoardTracker(fresh)
    try:
        for cycle in sorted(points):
            tracker.log(cycle, points[cycle])
    finally:
        tracker.close()
    # Readers see the old curve or the new one: the old folder moves aside before the new one takes its name.
    old = folder.with_name(f".{source}-old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    fresh.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    return folder
