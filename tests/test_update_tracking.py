"""An Update's TensorBoard event files, read back with TensorBoard's own reader, hold the curve's values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from update_standins import TOKENS, fresh_adapter, tiny_base, tiny_update

from mindforge.tracking import TrackingError, open_tracker


def test_tensorboard_events_are_the_curve(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    base = tiny_base(tmp_path / "base")
    result = tiny_update(tmp_path / "run", base, fresh_adapter(base, tmp_path / "fresh"), steps=2,
                         validate_after=True)
    out = tmp_path / "run" / "cycles" / "1" / "update"
    assert result.tensorboard == out / "tensorboard"
    events = EventAccumulator(str(result.tensorboard))
    events.Reload()

    curve = json.loads((out / "curve.json").read_text())
    assert len(curve) == 2 and curve[0]["grad_norm"] > 0 and curve[0]["completion_tokens"] == TOKENS
    assert all(0 <= r["no_signal_share"] <= 1 and r["reward_std"] >= 0 for r in curve)
    tags = set(events.Tags()["scalars"])
    for row in result.curve:
        for tag, value in row.scalars().items():
            assert tag in tags
            logged = {e.step: e.value for e in events.Scalars(tag)}
            assert logged[row.step] == pytest.approx(value, rel=1e-6, abs=1e-7), tag  # float32 in the file
    for r, row in zip(curve, result.curve, strict=True):  # curve.json holds the same numbers
        assert r["grad_norm"] == row.grad_norm and r["reward_std"] == row.reward_std
    (before,) = events.Scalars("validation/reward_before")
    (after,) = events.Scalars("validation/reward_after")
    assert before.step == after.step == 2
    assert math.isclose(before.value, result.reward_before, rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(after.value, result.reward_after, rel_tol=1e-6, abs_tol=1e-7)


def test_an_uninstalled_tracker_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError, as when not installed
    with pytest.raises(TrackingError, match="wandb"):
        open_tracker(("tensorboard", "wandb"), tmp_path / "tb", "run")
