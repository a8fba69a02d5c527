"""Handoff decisions with real weights and a stand-in engine.

The stand-in (an httpx MockTransport) serves adapters the way an engine does:
it loads the peft folder named in ``/v1/load_lora_adapter`` into its own copy
of the base model and samples with a KV cache, reporting each token's logprob.
The trainer side is a separate model object. So the probe compares two
independent loads of the same files, which is what makes a corrupted folder
visible. The real engine is exercised in tests/test_update_stage.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from mindforge.hcp import hcp_hash, load_hcp, read_json
from mindforge.update.catalog import WEIGHTS_FILE, AdapterCatalog, copy_adapter, write_peft_adapter
from mindforge.update.handoff import EngineAdmin, ProbeConfig, hand_off, teacher_forced_logprobs
from mindforge.update.inputs import default_hcp_path
from mindforge.update.policy import PARENT_ADAPTER, TRAIN_ADAPTER, load_policy
from mindforge.update.rollouts import RewardStats


class StandInEngine:
    def __init__(self, base_path: Path):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.base = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32)
        self.model = None
        self.loaded: list[str] = []
        self.calls: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/models":
            data = [{"id": "base", "parent": None}] + [{"id": n, "parent": "base"} for n in self.loaded]
            return httpx.Response(200, json={"data": data})
        if path == "/v1/load_lora_adapter":
            try:
                self._load(body["lora_name"], body["lora_path"])
            except (ValueError, OSError) as exc:  # an engine answers 400, it does not crash
                return httpx.Response(400, json={"error": str(exc)})
            return httpx.Response(200, json={})
        if path == "/v1/unload_lora_adapter":
            if body["lora_name"] not in self.loaded:
                return httpx.Response(404, json={"error": "not loaded"})
            self.model.delete_adapter(body["lora_name"])
            self.loaded.remove(body["lora_name"])
            return httpx.Response(200, json={})
        if path == "/v1/completions":
            return httpx.Response(200, json=self._complete(body))
        return httpx.Response(404)

    def _load(self, name: str, folder: str) -> None:
        from peft import PeftModel

        if self.model is None:
            self.model = PeftModel.from_pretrained(self.base, folder, adapter_name=name)
        else:
            self.model.load_adapter(folder, adapter_name=name)
        self.loaded.append(name)

    def _complete(self, body: dict) -> dict:
        torch = self.torch
        self.model.set_adapter(body["model"])
        gen = torch.Generator().manual_seed(body["seed"])
        ids, lps = [], []
        with torch.no_grad():
            out = self.model(torch.tensor([body["prompt"]]), use_cache=True)
            for _ in range(body["max_tokens"]):
                logp = torch.log_softmax(out.logits[0, -1].float(), -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                ids.append(tok)
                lps.append(float(logp[tok]))
                out = self.model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
        return {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": lps}}]}


@pytest.fixture(scope="module")
def base_path(tmp_path_factory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    path = tmp_path_factory.mktemp("base")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


@pytest.fixture
def setup(tmp_path: Path, base_path: Path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    fresh = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base_path)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
                           adapter_name="mf-L2")
    catalog = AdapterCatalog(tmp_path / "adapters")
    v0 = catalog.save("L2", write_peft_adapter(fresh, "mf-L2"), prefix="mf-L2")
    engine_impl = StandInEngine(base_path)
    engine = EngineAdmin("http://engine", transport=httpx.MockTransport(engine_impl.handle))
    engine.load(v0.name, v0.path)
    policy = load_policy(base_path, v0.path)
    with torch.no_grad():  # stands in for training: the adapter moves away from its parent
        for name, p in policy.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.3)
    trained = catalog.save("L2", write_peft_adapter(policy, TRAIN_ADAPTER), prefix="mf-L2", parent=0)
    doc = read_json(default_hcp_path())
    return SimpleNamespace(catalog=catalog, impl=engine_impl, engine=engine, policy=policy, trained=trained,
                           doc=doc, tmp=tmp_path)


def _go(s: SimpleNamespace, **kw):
    args = {
        "engine": s.engine, "entry": s.trained, "doc": s.doc, "probe_prompts": [[1, 5, 9, 12], [3, 3, 40]],
        "trainer": teacher_forced_logprobs(s.policy, TRAIN_ADAPTER),
        "parent": teacher_forced_logprobs(s.policy, PARENT_ADAPTER), "probe": ProbeConfig(max_tokens=8),
        "hcp_dir": s.tmp / "hcp", "catalog": s.catalog, "retention": 1,
    }
    return hand_off(**{**args, **kw})


def test_parity_passes_and_the_hcp_moves(setup) -> None:
    impl, doc = setup.impl, setup.doc
    result = _go(setup)
    assert result.promoted and result.served == "mf-L2-v0001", result.reason
    assert result.parity.ok and result.parity.max_abs_diff < 1e-4 and result.parity.tokens == 16
    assert result.parity.discriminative and result.parity.separation > 1e-2
    new = load_hcp(result.hcp_path)
    assert new.served_adapter("L2") == "mf-L2-v0001" and hcp_hash(new.to_document()) == result.hcp_hash
    assert result.hcp_hash != hcp_hash(doc) and doc["router"]["routes"]["L2"]["served_adapter"] == "mf-L2-v0000"
    # Retention 1: the parent is no longer served, so the engine drops it.
    assert result.unloaded == ("mf-L2-v0000",) and impl.loaded == ["mf-L2-v0001"]


def test_corrupted_weights_fail_the_probe_and_roll_back(setup) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    catalog, impl, trained, tmp = setup.catalog, setup.impl, setup.trained, setup.tmp
    weights = load_file(trained.path / WEIGHTS_FILE)
    save_file({k: v + 0.05 * torch.randn_like(v) for k, v in weights.items()}, trained.path / WEIGHTS_FILE)
    assert not catalog.check(trained)
    result = _go(setup)
    assert not result.promoted and not result.parity.ok and result.parity.max_abs_diff > 1e-3
    assert "parity probe failed" in result.reason and result.served == "mf-L2-v0000"
    assert impl.loaded == ["mf-L2-v0000"] and result.hcp_path is None
    assert not (tmp / "hcp").exists()


def test_a_regression_rolls_back_and_noise_does_not(setup) -> None:
    impl = setup.impl
    before = RewardStats(mean=0.6, se=0.1, tasks=2, samples=4, dropped=0, per_task={"a": 0.5, "b": 0.7})
    worse = RewardStats(mean=0.2, se=0.1, tasks=2, samples=4, dropped=0, per_task={"a": 0.1, "b": 0.3})
    result = _go(setup, validate=lambda name: worse, before=before, regression_tolerance=0.05)
    assert not result.promoted and "regressed" in result.reason and impl.loaded == ["mf-L2-v0000"]
    slightly = RewardStats(mean=0.55, se=0.1, tasks=2, samples=4, dropped=0, per_task={"a": 0.5, "b": 0.6})
    result = _go(setup, validate=lambda name: slightly, before=before, regression_tolerance=0.05,
                 regression_k_se=2.0)
    assert result.promoted, result.reason


def test_a_failed_load_keeps_the_old_mapping(setup) -> None:
    broken = setup.catalog.save("L2", copy_adapter(setup.trained.path), prefix="mf-L2", parent=1)
    (broken.path / "adapter_config.json").write_text("{not json")
    result = _go(setup, entry=broken)
    assert not result.promoted and result.reason.startswith("load failed") and result.served == "mf-L2-v0000"
