"""The model registry: the default model converted from its wheel, local folders, fresh adapters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require

from mindforge.engine.registry import (
    KNOWN,
    MANIFEST,
    ModelError,
    cached_folder,
    init_adapters,
    resolve_model,
    verify_model,
)
from mindforge.settings import Settings, load_settings

DEFAULT = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def model_dir() -> Path:
    folder = cached_folder(DEFAULT, Settings())
    require((folder / MANIFEST).is_file(), "default model not pulled (mindforge model pull)")
    return folder


def test_unknown_name_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="unknown model 'no-such-model'.*smollm2-135m-instruct"):
        resolve_model("no-such-model", Settings(cache_dir=tmp_path))


def test_a_folder_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelError, match="not a Hugging Face model folder"):
        resolve_model(tmp_path, Settings(cache_dir=tmp_path))


def test_a_half_converted_cache_is_not_used(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path)
    folder = cached_folder(DEFAULT, settings)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert verify_model(folder) == [f"{folder / MANIFEST}: missing"]


def test_tampered_weights_are_detected(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / MANIFEST).write_text(json.dumps({"weights_sha256": {"model.safetensors": "0" * 64}}))
    (problem,) = verify_model(tmp_path)
    assert "sha256 differs" in problem


@pytest.mark.model
def test_default_model_is_converted_with_tokenizer_and_template(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    assert resolve_model(DEFAULT, load_settings()) == model_dir
    assert resolve_model(model_dir, load_settings()) == model_dir  # a local folder is accepted where a name is
    manifest = json.loads((model_dir / MANIFEST).read_text())
    assert manifest["gguf_sha256"] == KNOWN[DEFAULT].gguf_sha256
    assert verify_model(model_dir) == []
    config = AutoConfig.from_pretrained(model_dir)
    assert config.model_type == "llama" and getattr(config, "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(model_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.model
def test_converted_model_answers_sensibly(model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_dict=True, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


@pytest.mark.model
def test_fresh_adapters_compute_the_base_model(model_dir: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    paths = init_adapters(model_dir, tmp_path, routes=("L0", "L2"))
    assert set(paths) == {"L0", "L2"}
    for p in paths.values():
        assert (p / "adapter_config.json").is_file() and (p / "adapter_model.safetensors").is_file()
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 314, 4575, 30]])
    with torch.no_grad():
        want = base(ids).logits
        model = PeftModel.from_pretrained(base, str(paths["L2"]), adapter_name="L2")
        model.load_adapter(str(paths["L0"]), adapter_name="L0")
        got = model(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    a0 = model.base_model.model.model.layers[0].self_attn.q_proj.lora_A
    assert not torch.equal(a0["L0"].weight, a0["L2"].weight)  # routes start apart


@pytest.mark.model
def test_cli_path_and_init_adapters(model_dir: Path, tmp_path: Path) -> None:
    mf = [sys.executable, "-m", "mindforge.cli"]
    out = subprocess.run([*mf, "model", "path"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(model_dir)
    out = subprocess.run([*mf, "model", "init-adapters", "--out", str(tmp_path), "--routes", "L1"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"L1": str(tmp_path / "L1")}
    bad = subprocess.run([*mf, "model", "path", "nope"], check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown model 'nope'" in bad.stderr
