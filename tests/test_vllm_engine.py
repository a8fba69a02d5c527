"""vLLM as the engine, for real, on the CPU: started by EngineProcess(backend="vllm").

One vLLM server for the session (it takes minutes to start on two busy cores; conftest.py):
its /v1/models lists the adapters it was given, it answers token-id
completions with logprobs and token ids (what rollouts need), it loads a new
adapter at runtime (Update's hand-off), and a harness turn runs through it.
Skipped locally where .venv-vllm is absent; CI installs it (`make setup VLLM=1`) and fails without it.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from harness_fakes import make_hcp, model_path, renderer

from mindforge.harness import open_harness, task_runner
from mindforge.tasks.models import Task

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model]

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def vllm(vllm_server):
    eng, adapters = vllm_server  # the session's vLLM (conftest.py), also behind the proxy tests
    return eng, make_hcp(), adapters


def completion(url: str, model: str, prompt_ids: list[int]) -> dict:
    body = {"model": model, "prompt": prompt_ids, "max_tokens": 4, "temperature": 0.0, "logprobs": 0,
            "return_token_ids": True}
    resp = httpx.post(url + "/v1/completions", json=body, timeout=600)
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]


def test_vllm_serves_the_adapters_with_token_ids_and_loads_new_ones(vllm, tmp_path) -> None:
    from mindforge.engine.registry import init_adapters

    eng, _, adapters = vllm
    served = {m["id"] for m in httpx.get(eng.url + "/v1/models", timeout=30).json()["data"]}
    assert {MODEL, *adapters} <= served, served
    ids = list(renderer().encode("The capital of France is"))
    choice = completion(eng.url, next(iter(adapters)), ids)
    assert choice["prompt_token_ids"] == ids and len(choice["token_ids"]) == 4
    assert len(choice["logprobs"]["token_logprobs"]) == 4
    assert all(lp <= 0.0 for lp in choice["logprobs"]["token_logprobs"])
    # Update's hand-off: a new versioned name, loaded at runtime
    fresh = init_adapters(model_path(), tmp_path / "fresh", routes=("L0",), seed=7)["L0"]
    resp = httpx.post(eng.url + "/v1/load_lora_adapter", json={"lora_name": "mf-L0-v0001", "lora_path": str(fresh)},
                      timeout=600)
    assert resp.status_code == 200, resp.text
    assert "mf-L0-v0001" in {m["id"] for m in httpx.get(eng.url + "/v1/models", timeout=30).json()["data"]}
    # a version name is loaded once: vLLM refuses the same name again, as the embedded engine does
    again = httpx.post(eng.url + "/v1/load_lora_adapter", json={"lora_name": "mf-L0-v0001", "lora_path": str(fresh)},
                       timeout=600)
    assert again.status_code == 400 and "already" in again.text, again.text
    # a fresh adapter computes exactly the base model (peft's B is zero): same greedy tokens
    assert completion(eng.url, "mf-L0-v0001", ids)["token_ids"] == choice["token_ids"]


def test_a_harness_turn_runs_through_vllm(vllm) -> None:
    eng, hcp, _ = vllm
    harness = open_harness(hcp, eng.url, model_path())
    task = Task(family="L2", prompt="Write a Python function add(a, b) that returns a + b.", output_kind="function",
                entry_point="add", tests=[{"name": "t", "code": "assert add(1, 2) == 3"}],
                reference="def add(a, b): return a + b")
    outcome = asyncio.run(task_runner(harness, max_tokens=8, summarize=False)(task, 0, None))
    assert [h.kind for h in outcome.hops] == ["route", "answer"] and outcome.route in ("L0", "L1", "L2", "L3")
    answer = outcome.hops[-1]
    assert answer.adapter == hcp.served_adapter(outcome.route) and answer.completion_ids
    assert len(answer.logprobs) == len(answer.completion_ids)


def test_the_parity_probe_holds_between_vllm_and_the_trainer_on_a_trained_adapter(vllm, tmp_path) -> None:
    """vLLM's logprobs of an adapter with non-zero B (a fresh one computes the base model) against the trainer's
    teacher-forced ones, fp32 both; the trainer's view of other weights fails the same probe."""
    import torch
    from safetensors.torch import load_file, save_file

    from mindforge.catalog import WEIGHTS_FILE
    from mindforge.engine.admin import EngineAdmin
    from mindforge.engine.registry import init_adapters
    from mindforge.update.handoff import ProbeConfig, parity_probe, teacher_forced_logprobs
    from mindforge.update.policy import TRAIN_ADAPTER, load_policy

    eng, _, _ = vllm

    def trained(folder_name: str, seed: int):
        folder = init_adapters(model_path(), tmp_path / folder_name, routes=("L2",), seed=3)["L2"]
        weights, gen = load_file(folder / WEIGHTS_FILE), torch.Generator().manual_seed(seed)
        save_file({k: v + 0.05 * torch.randn(v.shape, generator=gen) if "lora_B" in k else v
                   for k, v in weights.items()}, folder / WEIGHTS_FILE)
        return folder

    ours, other = trained("ours", 1), trained("other", 2)
    admin = EngineAdmin(eng.url)
    admin.load("mf-L2-v0042", ours)
    admin.load("mf-L2-v0043", other)
    trainer = teacher_forced_logprobs(load_policy(model_path(), ours), TRAIN_ADAPTER)
    prompts = [list(renderer().encode(text)) for text in
               ("Write a Python function that reverses a list.", "The capital of France is", "def fib(n):")]
    probe = ProbeConfig(max_tokens=16)
    held = parity_probe(admin, "mf-L2-v0042", prompts, trainer, probe)
    print(f"\nparity, vLLM vs trainer, trained adapter: max |logprob diff| {held.max_abs_diff:.2e} "
          f"over {held.tokens} tokens (tolerance {probe.tolerance:g})")
    assert held.ok and held.tokens == 48, held
    wrong = parity_probe(admin, "mf-L2-v0043", prompts, trainer, probe)
    print(f"parity against other weights: max |logprob diff| {wrong.max_abs_diff:.2e}")
    assert not wrong.ok and wrong.max_abs_diff > 10 * probe.tolerance
    admin.close()
