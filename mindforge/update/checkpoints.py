"""Checkpoints of an Update's training loop: a killed Update resumes where it stopped.

``checkpoints/step-NNNN`` holds what the rest of the loop depends on after
NNNN finished steps:

- ``adapter.safetensors``: the trainable adapter's tensors, by parameter name;
- ``trainer.pt``: the trainer's state (AdamW moments and step counts, its own
  step counter) and the torch RNG states;
- ``state.json``: the step index, the fingerprint of what was trained, Python's
  RNG state and whatever the stage keeps beside (the curve so far, validation
  before).

That is enough for the same weights as an uninterrupted run: the data order
is a function of (training tasks, step) and the rollouts' engine seeds of
(seed, step, task, sample), so the step index reproduces both once the
weights the engine serves are the checkpoint's. The fingerprint names the
tasks, seeds and training fields; a checkpoint with another fingerprint is
refused rather than silently continued.

A checkpoint is built in a temporary folder beside its final name and renamed
into place (one ``os.replace`` of a folder), so a kill leaves either the whole
checkpoint or none. Older checkpoints are removed only after the new one is
in place.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

ADAPTER_FILE = "adapter.safetensors"
TRAINER_FILE = "trainer.pt"
STATE_FILE = "state.json"
_NAME = re.compile(r"^step-(\d{4,})$")


class Resumable(Protocol):
    """A trainer whose state can be saved and restored (``GRPOTrainer``)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Checkpoint:
    step: int  # finished steps: training resumes at this step index
    path: Path
    state: dict[str, Any]  # state.json


def save_checkpoint(root: Path, step: int, policy: Any, trainer: Resumable, state: dict[str, Any]) -> Checkpoint:
    """Write ``root/step-NNNN`` atomically, then drop the older checkpoints."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:04d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=root))
    try:
        save_file({n: p.detach().cpu().contiguous() for n, p in _trainable(policy)}, str(tmp / ADAPTER_FILE))
        torch.save({"trainer": trainer.state_dict(), "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
                   tmp / TRAINER_FILE)
        full = {**state, "step": step, "python_rng": _python_rng()}
        (tmp / STATE_FILE).write_text(json.dumps(full, sort_keys=True, default=str) + "\n", encoding="utf-8")
        for f in tmp.iterdir():
            _fsync(f)
        if final.exists():  # a rerun of a step after a kill: same content, replaced whole
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(root)
    for old in _complete(root):
        if old[0] != step:
            shutil.rmtree(old[1], ignore_errors=True)
    return Checkpoint(step=step, path=final, state=full)


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest complete checkpoint under ``root`` (temporary folders of a killed write ignored)."""
    found = _complete(root)
    if not found:
        return None
    step, path = found[-1]
    return Checkpoint(step=step, path=path, state=json.loads((path / STATE_FILE).read_text(encoding="utf-8")))


def restore(checkpoint: Checkpoint, policy: Any, trainer: Resumable) -> None:
    """Put the checkpoint's adapter tensors, trainer state and RNG states back in place."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(checkpoint.path / ADAPTER_FILE))
    params = dict(_trainable(policy))
    if set(tensors) != set(params):
        raise ValueError(f"checkpoint {checkpoint.path} holds other trainable tensors than the policy "
                         f"({len(tensors)} vs {len(params)})")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name].to(p.device, p.dtype))
    saved = torch.load(checkpoint.path / TRAINER_FILE, map_location="cpu", weights_only=True)
    trainer.load_state_dict(saved["trainer"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    version, internal, gauss = checkpoint.state["python_rng"]
    random.setstate((version, tuple(internal), gauss))


def remove_checkpoints(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


def _trainable(policy: Any) -> list[tuple[str, Any]]:
    return [(n, p) for n, p in policy.named_parameters() if p.requires_grad]


def _complete(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return sorted(found)


def _python_rng() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
