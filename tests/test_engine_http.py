"""The embedded engine over HTTP with the real default model (``EngineProcess``, a real server).

Kept short: a few tokens a request. The logprob reference is a fresh
transformers + peft model in this process, teacher-forced over the same ids,
as the trainer computes it.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import httpx
import pytest
import torch
from helpers import require

from mindforge.engine.metrics import parse_metrics
from mindforge.settings import Settings

pytestmark = pytest.mark.model
MODEL = Settings().model


def model_folder() -> Path | None:
    folder = Settings().models_dir / MODEL
    return folder if (folder / "MANIFEST.json").is_file() else None


def perturb(adapter: Path, seed: int) -> None:
    """Give a fresh adapter non-zero B so it computes something other than the base model."""
    from safetensors.torch import load_file, save_file

    path = adapter / "adapter_model.safetensors"
    tensors = load_file(str(path))
    gen = torch.Generator().manual_seed(seed)
    for name, t in tensors.items():
        if "lora_B" in name:
            tensors[name] = torch.randn(t.shape, generator=gen) * 0.02
    save_file(tensors, str(path))


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    require(model_folder() is not None, f"the default model is not cached (mindforge model pull {MODEL})")
    from mindforge.engine.registry import init_adapters

    paths = init_adapters(model_folder(), tmp_path_factory.mktemp("adapters"), routes=("L1", "L2", "L3"), rank=4)
    for i, path in enumerate(paths.values()):
        perturb(path, seed=i)
    return paths


@pytest.fixture(scope="module")
def engine(adapters, tmp_path_factory):
    from mindforge.engine import EngineProcess

    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with (EngineProcess(MODEL, {"L1": adapters["L1"], "L2": adapters["L2"]}, settings=Settings(), log_path=log) as proc,
          httpx.Client(base_url=proc.url, timeout=300) as client):
        yield client


def metrics(client: httpx.Client) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return parse_metrics(r.text)


def complete(client: httpx.Client, **body) -> dict:
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def reference(adapter: Path, ids: list[int]) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(model_folder()), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    return logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_token_id_prompt_returns_ids_and_logprobs_of_the_sampling_distribution(engine, adapters):
    base = engine.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}).json()
    prompt = [1, 4093, 198, 504, 3575, 282, 4649, 314, 2]  # arbitrary in-vocabulary ids
    body = complete(engine, model="L1", prompt=prompt, max_tokens=8, temperature=1.0, top_p=1.0, seed=11,
                    logprobs=2, return_token_ids=True)
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == prompt and len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"])
    assert body["usage"]["prompt_tokens"] == len(prompt) and base["model"] == MODEL
    ref = reference(adapters["L1"], prompt + choice["token_ids"])[len(prompt) - 1:]
    got = torch.tensor(choice["logprobs"]["token_logprobs"])
    assert torch.allclose(got, ref, atol=1e-4), (got - ref).abs().max()
    again = complete(engine, model="L1", prompt=prompt, max_tokens=8, seed=11, return_token_ids=True)
    assert again["choices"][0]["token_ids"] == choice["token_ids"]  # the seed fixes the draw


def test_prefix_cache_hits_on_reentry_and_never_across_adapters(engine, adapters):
    first = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 30, 2, 198] * 6
    turn1 = complete(engine, model="L2", prompt=first, max_tokens=6, temperature=0, return_token_ids=True)
    before = metrics(engine)
    second = first + turn1["choices"][0]["token_ids"] + [1, 4093, 198, 7306, 30, 2, 198]
    turn2 = complete(engine, model="L2", prompt=second, max_tokens=2, temperature=0)
    after = metrics(engine)
    assert after["mindforge_engine_prefix_cache_hits_total"] == before["mindforge_engine_prefix_cache_hits_total"] + 1
    saved = after["mindforge_engine_prefill_tokens_saved_total"] - before["mindforge_engine_prefill_tokens_saved_total"]
    assert saved == turn2["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(first)
    r = engine.post("/v1/load_lora_adapter", json={"lora_name": "L2-fresh", "lora_path": str(adapters["L2"])})
    assert r.status_code == 200, r.text
    fresh = complete(engine, model="L2-fresh", prompt=second, max_tokens=2, temperature=0)
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert fresh["choices"][0]["text"] == turn2["choices"][0]["text"]  # same weights, recomputed


def test_concurrent_requests_are_batched_and_match_sequential_greedy(engine):
    prompts = [f"Question {i}: name a colour and a number." for i in range(8)]
    names = ["L1", "L2", MODEL, "L1", "L2", MODEL, "L1", "L2"]

    def run(i: int) -> list[int]:
        body = complete(engine, model=names[i], prompt=prompts[i], max_tokens=8, temperature=0,
                        return_token_ids=True)
        return body["choices"][0]["token_ids"]

    sequential = [run(i) for i in range(8)]
    before = metrics(engine)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        batched = list(pool.map(run, range(8)))
    after = metrics(engine)
    assert batched == sequential
    steps = after["mindforge_engine_batch_size_count"] - before["mindforge_engine_batch_size_count"]
    rows = after["mindforge_engine_batch_size_sum"] - before["mindforge_engine_batch_size_sum"]
    assert rows / steps > 1.5, (rows, steps)
    singles = after['mindforge_engine_batch_size_bucket{le="1"}'] - before['mindforge_engine_batch_size_bucket{le="1"}']
    assert singles < steps


def test_a_burst_is_prefilled_together_and_metrics_give_rates(engine):
    before = metrics(engine)

    def run(i: int) -> int:
        body = complete(engine, model=("L1", "L2", MODEL)[i % 3], prompt=f"Burst {i}: list three fruits.",
                        max_tokens=6, temperature=0, ignore_eos=True)
        return body["usage"]["completion_tokens"]

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        assert sum(pool.map(run, range(12))) == 72
    after = metrics(engine)
    requests = after["mindforge_engine_requests_total"] - before["mindforge_engine_requests_total"]
    prefills = after["mindforge_engine_prefill_batches_total"] - before["mindforge_engine_prefill_batches_total"]
    assert requests == 12 and prefills < requests  # prompts that arrive together share a prefill
    assert after["mindforge_engine_generation_tokens_per_second"] > 0
    assert 1 < after["mindforge_engine_mean_decode_batch"] <= 12
    assert 0 < after["mindforge_engine_decode_step_seconds"] < 10


def test_adapters_load_list_and_unload(engine, adapters):
    r = engine.post("/v1/load_lora_adapter", json={"lora_name": "L3", "lora_path": str(adapters["L3"])})
    assert r.status_code == 200, r.text
    cards = {m["id"]: m for m in engine.get("/v1/models").json()["data"]}
    assert cards[MODEL]["parent"] is None and cards["L3"]["parent"] == MODEL and cards["L1"]["parent"] == MODEL
    assert complete(engine, model="L3", prompt="Hi", max_tokens=2)["model"] == "L3"
    assert engine.post("/v1/unload_lora_adapter", json={"lora_name": "L3"}).status_code == 200
    assert "L3" not in {m["id"] for m in engine.get("/v1/models").json()["data"]}
    gone = engine.post("/v1/completions", json={"model": "L3", "prompt": "Hi", "max_tokens": 2})
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "model"
    again = engine.post("/v1/unload_lora_adapter", json={"lora_name": "L3"})
    assert again.status_code == 404
    dup = engine.post("/v1/load_lora_adapter", json={"lora_name": "L1", "lora_path": str(adapters["L1"])})
    assert dup.status_code == 400 and "already loaded" in dup.json()["error"]["message"]
    missing = engine.post("/v1/load_lora_adapter", json={"lora_name": "X", "lora_path": "/nonexistent/adapter"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "lora_path"


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"model": "nope", "prompt": "x"}, 404, "model"),
    ({"model": "L1"}, 400, "prompt"),
    ({"model": "L1", "prompt": [1, 2, 10**9]}, 400, "prompt/2"),
    ({"model": "L1", "prompt": ["a", "b"]}, 400, "prompt"),
    ({"model": "L1", "prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"model": "L1", "prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"model": "L1", "prompt": "x", "max_tokens": 10**6}, 400, "max_tokens"),
    ({"model": "L1", "prompt": "x", "n": 0}, 400, "n"),
])
def test_bad_requests_name_the_field_and_the_server_keeps_serving(engine, body, status, param):
    r = engine.post("/v1/completions", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param)
    assert err["type"] in ("invalid_request_error", "not_found_error")
    assert complete(engine, model="L1", prompt="ok", max_tokens=1)["choices"][0]["finish_reason"] in ("stop", "length")


def test_malformed_json_and_chat_completions(engine):
    r = engine.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    r = engine.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = engine.post("/v1/chat/completions", json={
        "model": "L1", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 6, "temperature": 0,
        "logprobs": True, "top_logprobs": 1, "return_token_ids": True})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) > 0


def test_engine_process_reports_a_bad_adapter_with_the_log(tmp_path):
    require(model_folder() is not None, f"the default model is not cached (mindforge model pull {MODEL})")
    from mindforge.engine import EngineProcess
    from mindforge.engine.launch import EngineStartError

    with pytest.raises(EngineStartError, match="adapter_config.json"):
        EngineProcess(MODEL, {"X": tmp_path}, settings=Settings(), startup_timeout_s=120).start()


def test_a_bfloat16_engine_says_so_and_stays_within_the_probes_bf16_bound(adapters, tmp_path):
    from mindforge.engine import EngineProcess
    from mindforge.engine.admin import EngineAdmin
    from mindforge.update.handoff import ProbeConfig

    settings = Settings(engine_dtype="bfloat16")
    with (EngineProcess(MODEL, {"L1": adapters["L1"]}, settings=settings, log_path=tmp_path / "engine.log") as proc,
          httpx.Client(base_url=proc.url, timeout=300) as client):
        assert client.get("/health").json() == {"status": "ok", "dtype": "bfloat16"}
        admin = EngineAdmin(proc.url)
        assert admin.dtype() == "bfloat16"
        admin.close()
        prompt = [1, 4093, 198, 504, 3575, 282, 4649, 314, 2]
        body = complete(client, model="L1", prompt=prompt, max_tokens=8, temperature=1.0, top_p=1.0, seed=11,
                        logprobs=1, return_token_ids=True)
    choice = body["choices"][0]
    ref = reference(adapters["L1"], prompt + choice["token_ids"])[len(prompt) - 1:]
    diff = (torch.tensor(choice["logprobs"]["token_logprobs"]) - ref).abs().max().item()
    # Really computed in bfloat16 (fp32 agrees to ~1e-5), and within the bound its hand-off probe uses.
    assert 1e-4 < diff < ProbeConfig().bf16_tolerance, diff
