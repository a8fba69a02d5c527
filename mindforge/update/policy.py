"""The trainable policy: the base model with a route's adapter, and its parent beside it.

The base model is loaded in fp32 from the same local folder the embedded
engine serves (no hub download), so trainer and engine logprobs agree to
rounding. Two peft adapters are loaded from the parent catalog version:

- ``policy``: trainable, the weights GRPO updates;
- ``parent``: frozen, used only to show that the parity probe can tell the
  trained weights from the ones they started from.

The reference policy for a KL term is the base with adapters disabled
(``with model.disable_adapter()``), as the trainer defines it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRAIN_ADAPTER = "policy"  # not "train": an nn.Module attribute of that name exists
PARENT_ADAPTER = "parent"


def load_policy(model_path: Path, adapter_path: Path, device: str = "cpu", seed: int = 0) -> Any:
    """A ``PeftModel`` with ``policy`` (trainable, active) and ``parent`` (frozen) loaded."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter_path), adapter_name=TRAIN_ADAPTER, is_trainable=True)
    model.load_adapter(str(adapter_path), adapter_name=PARENT_ADAPTER, is_trainable=False)
    model.set_adapter(TRAIN_ADAPTER)
    return model.to(device)


def trainable_names(model: Any) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]
