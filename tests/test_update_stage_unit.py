"""Handoff decisions with real weights and a stand-in engine (tests/update_standins.py).

The stand-in serves adapters the way an engine does, from its own copy of the
base model. The trainer side is a separate model object. So the probe compares two
independent loads of the same files, which is what makes a corrupted folder
visible. The real engine is exercised in tests/test_update_stage.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from update_standins import TOKENS, StandInEngine, services, tiny_base

from mindforge.catalog import WEIGHTS_FILE, AdapterCatalog, copy_adapter, write_peft_adapter
from mindforge.engine.admin import EngineAdmin
from mindforge.hcp import hcp_hash, load_hcp, read_json
from mindforge.paths import default_hcp_path
from mindforge.rollouts import RewardStats
from mindforge.store import RunDir
from mindforge.update.handoff import ProbeConfig, hand_off, teacher_forced_logprobs
from mindforge.update.policy import PARENT_ADAPTER, TRAIN_ADAPTER, load_policy


@pytest.fixture(scope="module")
def base_path(tmp_path_factory) -> Path:
    return tiny_base(tmp_path_factory.mktemp("base"))


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


def test_a_bfloat16_engine_is_held_to_the_bf16_bound_and_an_fp32_one_to_1e_3(setup) -> None:
    setup.impl.logprob_shift = 0.05  # bf16 rounding's size on the default model (up to 0.12 measured)
    setup.impl.dtype = "float32"
    fp32 = _go(setup)
    assert not fp32.promoted and fp32.parity.tolerance == 1e-3 and fp32.parity.max_abs_diff > 0.04
    setup.impl.dtype = "bfloat16"
    bf16 = _go(setup)
    assert bf16.promoted and bf16.parity.ok and bf16.parity.tolerance == ProbeConfig().bf16_tolerance
    assert "bfloat16" in bf16.parity.detail
    # An engine that reports no dtype (vLLM, SGLang) is held to the one the settings declare for it.
    setup.impl.dtype = None
    silent = EngineAdmin("http://engine", transport=httpx.MockTransport(setup.impl.handle), declared_dtype="bfloat16")
    again = setup.catalog.save("L2", write_peft_adapter(setup.policy, TRAIN_ADAPTER), prefix="mf-L2", parent=1)
    declared = _go(setup, engine=silent, entry=again, doc=read_json(bf16.hcp_path))
    assert declared.parity.ok and declared.parity.tolerance == ProbeConfig().bf16_tolerance


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


def test_with_require_gain_no_worse_is_not_enough(setup) -> None:
    same = RewardStats(mean=0.25, se=0.1, tasks=2, samples=2, dropped=0, per_task={"a": 0.5, "b": 0.0})
    result = _go(setup, validate=lambda name: same, before=same, require_gain=True)
    assert not result.promoted and "no gain" in result.reason and result.served == "mf-L2-v0000"
    better = RewardStats(mean=0.5, se=0.1, tasks=2, samples=2, dropped=0, per_task={"a": 0.5, "b": 0.5})
    assert _go(setup, validate=lambda name: better, before=same, require_gain=True).promoted


def test_a_failed_load_keeps_the_old_mapping(setup) -> None:
    broken = setup.catalog.save("L2", copy_adapter(setup.trained.path), prefix="mf-L2", parent=1)
    (broken.path / "adapter_config.json").write_text("{not json")
    result = _go(setup, entry=broken)
    assert not result.promoted and result.reason.startswith("load failed") and result.served == "mf-L2-v0000"


def test_a_name_the_engine_already_serves_is_refused_and_left_alone(setup) -> None:
    """Another run sharing the engine loaded its own mf-L2-v0001: ours is not reloaded over it, nor is it unloaded."""
    impl = setup.impl
    setup.engine.load(setup.trained.name, setup.catalog.find("mf-L2-v0000").path)  # same name, other weights
    calls = len(impl.calls)
    result = _go(setup)
    assert not result.promoted and result.served == "mf-L2-v0000" and result.hcp_path is None
    assert "already serves an adapter named mf-L2-v0001" in result.reason
    assert impl.loaded == ["mf-L2-v0000", "mf-L2-v0001"]  # nothing unloaded
    assert "/v1/load_lora_adapter" not in impl.calls[calls:] and "/v1/unload_lora_adapter" not in impl.calls[calls:]


def test_stage_trains_on_policy_hands_off_and_records(tmp_path: Path, base_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mindforge.store import read_parquet
    from mindforge.tasks.models import Trajectory
    from mindforge.update.inputs import current_hcp_path
    from mindforge.update.stage import UpdateConfig, run_update

    torch.manual_seed(2)
    fresh = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base_path)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]), adapter_name="fresh")
    catalog = AdapterCatalog(tmp_path / "adapters")
    v0 = catalog.save("L2", write_peft_adapter(fresh, "fresh"), prefix="mf-L2")
    impl = StandInEngine(base_path)
    engine = EngineAdmin("http://engine", transport=httpx.MockTransport(impl.handle))
    engine.load(v0.name, v0.path)
    config = UpdateConfig(run_dir=tmp_path, cycle=1, steps=3, group_size=4, batch_tasks=2, reward="pass_fraction",
                          validation_tasks=2, validation_samples=2, grpo={"lr": 0.05}, probe_prompts=2,
                          regression_tolerance=1.0, rft={"enabled": False})
    result = run_update(config, services(catalog, engine, base_path, read_json(default_hcp_path())))

    assert result.promoted and result.version == "mf-L2-v0001" == result.candidate, result.reason
    assert result.parity.ok and result.parity.max_abs_diff < 1e-4 and result.parity.discriminative
    assert len(result.curve) == 3 and all(r.tokens == 2 * 4 * TOKENS for r in result.curve)
    assert result.reward_after is not None and result.se is not None and result.validation_tasks == 2
    summary = result.summary()
    assert set(summary) >= {"route", "version", "parity", "reward_before", "reward_after", "se", "hcp"}
    json.dumps(summary)
    entry = catalog.get("L2", 1)
    assert entry.meta.parent == 0 and entry.meta.cycle == 1 and len(entry.meta.training.task_ids) >= 2
    assert entry.meta.hcp_version == hcp_hash(read_json(default_hcp_path()))
    # On policy: step k>0 sampled from the weights after step k-1, under a scratch name, since unloaded.
    out = tmp_path / "cycles" / "1" / "update"
    step1 = read_parquet(out / "trajectories" / "train-step001.parquet", Trajectory)
    assert {t.hops[0].adapter for t in step1} == {"mf-L2-train-1-001"}
    assert impl.loaded == ["mf-L2-v0000", "mf-L2-v0001"] and not (out / "scratch").exists()
    assert {p.name for p in (out / "trajectories").iterdir()} == {
        "validation-before.parquet", "validation-after.parquet",
        "train-step000.parquet", "train-step001.parquet", "train-step002.parquet"}
    # The next cycle starts from the promoted HCP and the new version.
    assert current_hcp_path(RunDir(tmp_path), 2) == result.hcp_path
    assert load_hcp(result.hcp_path).served_adapter("L2") == "mf-L2-v0001"
    done = json.loads((out / "DONE.json").read_text())
    assert done["version"] == "mf-L2-v0001" and len(done["curve"]) == 3
    print("curve", [(r.mean_reward, r.loss) for r in result.curve], "before/after",
          result.reward_before, result.reward_after)
