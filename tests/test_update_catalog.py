"""Adapter catalog: versions, metadata, parent chains, atomic saves, retention.

Uses a real peft adapter on a tiny Llama built in memory (no download), so the
files are exactly what peft writes and reads back.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from mindforge.catalog import (
    CONFIG_FILE,
    METADATA_FILE,
    WEIGHTS_FILE,
    AdapterCatalog,
    CatalogError,
    TrainingData,
    copy_adapter,
    write_peft_adapter,
)


@pytest.fixture(scope="module")
def peft_model():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1,
    )
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(LlamaForCausalLM(cfg), lora, adapter_name="mf-L2")


def test_versions_metadata_and_lineage(tmp_path: Path, peft_model) -> None:
    cat = AdapterCatalog(tmp_path / "adapters")
    assert cat.versions("L2") == [] and cat.latest("L2") is None
    v0 = cat.save("L2", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L2", cycle=0)
    v1 = cat.save(
        "L2", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L2", parent=v0.version, cycle=1,
        hcp_version="h-0123456789abcdef", base_model="tiny",
        training=TrainingData(task_ids=("t-a", "t-b"), dataset="cycles/1/update/trajectories", steps=2),
        metrics={"reward_after": 0.5},
    )
    assert (v0.version, v0.name, v1.version, v1.name) == (0, "mf-L2-v0000", 1, "mf-L2-v0001")
    assert sorted(os.listdir(v1.path)) == sorted([CONFIG_FILE, WEIGHTS_FILE, METADATA_FILE])
    meta = json.loads((v1.path / METADATA_FILE).read_text())
    assert meta["parent"] == 0 and meta["cycle"] == 1 and meta["training"]["task_ids"] == ["t-a", "t-b"]
    assert meta["hcp_version"] == "h-0123456789abcdef" and meta["metrics"] == {"reward_after": 0.5}
    assert [v.version for v in cat.lineage("L2", 1)] == [1, 0]
    assert cat.latest("L2").version == 1 and cat.find("mf-L2-v0001").path == v1.path
    assert cat.check(v1)
    # A copy of a version is a new version with the same weights.
    v2 = cat.save("L2", copy_adapter(v1.path), prefix="mf-L2", parent=1)
    assert v2.meta.weights_sha256 == v1.meta.weights_sha256
    assert cat.versions("L0") == []
    with pytest.raises(CatalogError):
        cat.get("L2", 7)
    with pytest.raises(CatalogError):
        cat.route_dir("L9")


def test_saved_version_loads_back_in_peft(tmp_path: Path, peft_model) -> None:
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    cat = AdapterCatalog(tmp_path)
    v = cat.save("L2", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L2")
    base = LlamaForCausalLM(peft_model.base_model.model.config)
    base.load_state_dict(
        {k.replace("base_layer.", ""): t for k, t in peft_model.base_model.model.state_dict().items()
         if "lora_" not in k}
    )
    loaded = PeftModel.from_pretrained(base, str(v.path), adapter_name="x")
    ids = torch.tensor([[1, 5, 9, 3]])
    peft_model.set_adapter("mf-L2")
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, peft_model(ids).logits, atol=1e-6)


def test_failed_write_leaves_nothing_and_tampering_is_detected(tmp_path: Path, peft_model) -> None:
    cat = AdapterCatalog(tmp_path)

    def crash(folder: Path) -> None:
        (folder / CONFIG_FILE).write_text("{}")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        cat.save("L2", crash, prefix="mf-L2")
    with pytest.raises(CatalogError):
        cat.save("L2", lambda folder: None, prefix="mf-L2")  # no files written
    assert cat.versions("L2") == [] and list((tmp_path / "L2").iterdir()) == []
    # A leftover of a killed process (no rename happened) is invisible, then swept.
    stale = tmp_path / "L2" / ".writing-dead"
    stale.mkdir()
    os.utime(stale, (0, 0))
    v = cat.save("L2", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L2")
    assert not stale.exists() and v.version == 0
    weights = v.path / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert not cat.check(v)


def test_concurrent_saves_get_distinct_versions(tmp_path: Path, peft_model) -> None:
    cat = AdapterCatalog(tmp_path)
    src = cat.save("L1", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L1")
    out: list[int] = []
    errors: list[BaseException] = []

    def save() -> None:
        try:
            out.append(cat.save("L1", copy_adapter(src.path), prefix="mf-L1").version)
        except BaseException as exc:  # noqa: BLE001 - a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(out) == [1, 2, 3, 4, 5, 6]
    assert [v.version for v in cat.versions("L1")] == list(range(7))


def test_retention_names_what_the_engine_may_unload(tmp_path: Path, peft_model) -> None:
    cat = AdapterCatalog(tmp_path)
    first = cat.save("L3", write_peft_adapter(peft_model, "mf-L2"), prefix="mf-L3")
    for _ in range(4):
        cat.save("L3", copy_adapter(first.path), prefix="mf-L3")
    assert [v.name for v in cat.stale("L3", keep=2)] == [f"mf-L3-v000{i}" for i in range(3)]
    # A version still served (e.g. after a rollback) is never stale.
    assert [v.version for v in cat.stale("L3", keep=2, in_use=["mf-L3-v0001"])] == [0, 2]
    assert len(cat.versions("L3")) == 5  # retention never deletes from disk
