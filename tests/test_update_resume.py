"""A killed Update resumes at its last checkpoint and reaches the weights of an uninterrupted run.

The kill is real: the Update runs in a child process that is SIGKILLed once
its checkpoint after step 1 is on disk (the child waits there, so the point
is known). The rerun in this process starts a fresh stand-in engine, as a
rerun after a crash finds one, and must train steps 1 and 2 only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from update_standins import fresh_adapter, tiny_base, tiny_update

from mindforge.catalog import WEIGHTS_FILE

KILL_AT = 1  # finished steps when the child is killed (of 3)
RFT = {"attempts": 1, "max_tasks": 2, "epochs": 1}  # a rejection-sampling phase before GRPO: its report survives


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> tuple[Path, Path]:
    base = tiny_base(tmp_path_factory.mktemp("base"))
    return base, fresh_adapter(base, tmp_path_factory.mktemp("fresh"))


def _killed_run(run_dir: Path, base: Path, adapter: Path) -> None:
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from update_standins import tiny_update

        def progress(done, total, row):
            if row is None and done == {KILL_AT}:  # step {KILL_AT} starts: its checkpoint is written
                time.sleep(600)

        tiny_update(Path({str(run_dir)!r}), Path({str(base)!r}), Path({str(adapter)!r}), progress, rft={RFT!r})
    """)
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    checkpoint = run_dir / "cycles" / "1" / "update" / "checkpoints" / f"step-{KILL_AT:04d}"
    try:
        deadline = time.monotonic() + 240
        while not checkpoint.is_dir():
            assert child.poll() is None, f"the child ended (rc {child.returncode}) before checkpoint {KILL_AT}"
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.2)
        time.sleep(1.0)  # the child is past the checkpoint, waiting at the next step's start
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL


def _weights(result) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(result.adapter_path) / WEIGHTS_FILE))


def test_a_killed_update_resumes_to_the_same_adapter(tmp_path: Path, parts: tuple[Path, Path]) -> None:
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    base, adapter = parts
    whole = tiny_update(tmp_path / "whole", base, adapter, rft=RFT)

    resumed_dir = tmp_path / "resumed"
    _killed_run(resumed_dir, base, adapter)
    out = resumed_dir / "cycles" / "1" / "update"
    assert not (out / "DONE.json").exists() and (out / "checkpoints" / f"step-{KILL_AT:04d}").is_dir()
    started: list[int] = []
    resumed = tiny_update(resumed_dir, base, adapter,
                          lambda done, total, row: started.append(done) if row is None else None, rft=RFT)

    assert started == [1, 2]  # steps before the checkpoint were not trained again
    assert whole.rft is not None and resumed.rft is not None  # the phase's report, from the checkpoint
    assert resumed.rft.model_dump(exclude={"seconds"}) == whole.rft.model_dump(exclude={"seconds"})
    a, b = _weights(whole), _weights(resumed)
    parent = _weights_of(adapter)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], parent[k]) for k in a)  # training moved the weights
    assert [r.model_dump(exclude={"seconds"}) for r in resumed.curve] == \
        [r.model_dump(exclude={"seconds"}) for r in whole.curve]
    assert not (out / "checkpoints").exists()  # finished: the catalog version holds the weights
    # TensorBoard shows each step once, with the resumed attempt's values (the killed one's purged).
    events = EventAccumulator(str(resumed.tensorboard))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == [0, 1, 2]
    assert [e.value for e in losses] == pytest.approx([r.loss for r in whole.curve], rel=1e-6, abs=1e-7)


def _weights_of(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / WEIGHTS_FILE))


def test_a_half_written_checkpoint_is_ignored_and_older_ones_go(tmp_path: Path) -> None:
    import torch

    from mindforge.update.checkpoints import latest_checkpoint, restore, save_checkpoint

    class Trainer:
        def __init__(self, policy):
            self.opt = torch.optim.AdamW(policy.parameters(), lr=0.1)

        def state_dict(self):
            return {"optimizer": self.opt.state_dict()}

        def load_state_dict(self, state):
            self.opt.load_state_dict(state["optimizer"])

    torch.manual_seed(0)
    policy = torch.nn.Linear(3, 2)
    trainer = Trainer(policy)
    policy(torch.ones(1, 3)).sum().backward()
    trainer.opt.step()
    save_checkpoint(tmp_path, 1, policy, trainer, {"fingerprint": "a"})
    saved = {k: v.clone() for k, v in policy.state_dict().items()}
    save_checkpoint(tmp_path, 2, policy, trainer, {"fingerprint": "a"})
    (tmp_path / ".step-0003.x.tmp").mkdir()  # a write killed before its rename
    found = latest_checkpoint(tmp_path)
    assert found is not None and found.step == 2 and found.state["fingerprint"] == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".step-0003.x.tmp", "step-0002"]

    other = torch.nn.Linear(3, 2)
    again = Trainer(other)
    restore(found, other, again)
    assert all(torch.equal(saved[k], v) for k, v in other.state_dict().items())
    assert torch.equal(again.opt.state_dict()["state"][0]["exp_avg"], trainer.opt.state_dict()["state"][0]["exp_avg"])
