"""The engine's scheduler, prefix cache and sampling on a tiny random Llama model (no HTTP).

The references are independent of the engine: a fresh peft model loaded
from the same adapter folder, run teacher-forced over the whole sequence.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest
import torch
from engine_tiny import make_adapter, make_model

from mindforge.engine import kv
from mindforge.engine.model import AdapterError, EngineModel
from mindforge.engine.prefix_cache import PrefixCache
from mindforge.engine.sampling import SamplingParams, draw, make_generator, sampling_logprobs
from mindforge.engine.scheduler import AdapterNameError, Scheduler
from mindforge.engine.sequence import GenerationRequest, UnknownModel


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    make_model(root / "model")
    make_adapter(root / "model", root / "A", seed=1)
    make_adapter(root / "model", root / "B", seed=2)
    return root


@pytest.fixture()
def engine(tiny):
    sched = Scheduler(EngineModel(tiny / "model"), "tiny", prefix_cache_tokens=4096)
    sched.start()
    sched.load_adapter("A", tiny / "A").result(30)
    sched.load_adapter("B", tiny / "B").result(30)
    yield sched
    sched.stop()


def reference_logprobs(tiny: Path, adapter: str | None, ids: list[int]) -> torch.Tensor:
    """log p(ids[t+1] | ids[:t+1]) from a fresh transformers(+peft) model: what a trainer computes."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny / "model"))
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(tiny / adapter))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    return logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def generate(sched: Scheduler, model: str, ids: list[int], **params):
    return sched.submit(GenerationRequest(model, ids, SamplingParams(**params))).result(60)


def prompt(sched: Scheduler, text: str) -> list[int]:
    return sched.model.tokenizer.encode(text)


# ---------------------------------------------------------------- prefix cache
def fake_kv(n: int, fill: float = 0.0) -> kv.RowKV:
    t = torch.full((1, 1, n, 2), fill)
    return kv.RowKV(((t, t.clone()),))


def test_prefix_cache_longest_prefix_per_slot_and_subsumption():
    cache = PrefixCache(max_tokens=100)
    cache.insert("a", [1, 2, 3], fake_kv(3))
    cache.insert("a", [1, 2, 3, 4, 5], fake_kv(5))  # extends the first: replaces it
    assert len(cache) == 1 and cache.tokens == 5
    cache.insert("a", [1, 2], fake_kv(2))  # a prefix of an entry: nothing new
    assert len(cache) == 1
    got, n = cache.lookup("a", [1, 2, 3, 9])
    assert n == 3 and got.length == 3
    assert cache.lookup("a", [1, 2, 3, 4, 5, 6], max_len=4)[1] == 4
    assert cache.lookup("b", [1, 2, 3]) == (None, 0)  # another slot never matches
    assert cache.lookup("a", [7, 1, 2]) == (None, 0)


def test_prefix_cache_evicts_least_recently_used_by_tokens():
    cache = PrefixCache(max_tokens=10)
    cache.insert("a", [1] * 4, fake_kv(4))
    cache.insert("a", [2] * 4, fake_kv(4))
    cache.lookup("a", [1, 1])  # touch the first
    cache.insert("b", [3] * 4, fake_kv(4))  # 12 > 10: the least recently used ([2]*4) goes
    assert cache.tokens == 8
    assert cache.lookup("a", [2, 2])[1] == 0 and cache.lookup("a", [1, 1])[1] == 2
    assert not cache.insert("a", [5] * 11, fake_kv(11))  # larger than the whole budget
    assert cache.drop_slot("b") == 4 and cache.tokens == 4


def test_rebuild_left_pads_rows_and_keeps_their_values():
    a, b = fake_kv(3, 1.0), fake_kv(5, 2.0)
    batch = kv.rebuild(None, [], [a, b], headroom=4)
    assert batch.width == 5 and batch.kv_len == [3, 5]
    assert torch.equal(batch.row(0).layers[0][0], a.layers[0][0])
    mask, pos = batch.decode_inputs("cpu")
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]] and pos.tolist() == [[3], [5]]
    smaller = kv.rebuild(batch, [0], [])  # the long row left: leading padding is trimmed
    assert smaller.width == 3 and torch.equal(smaller.row(0).layers[0][1], a.layers[0][1])


def test_a_joining_row_takes_a_dead_rows_place_and_trim_narrows_the_view():
    a, b, c = fake_kv(3, 1.0), fake_kv(5, 2.0), fake_kv(2, 3.0)
    batch = kv.rebuild(None, [], [a, b], headroom=4)
    start, storage = batch.layers[0].buf_k.data_ptr(), batch.layers[0].buf_k.untyped_storage().data_ptr()
    assert not kv.place(batch, [], [c])  # no free row: the caller rebuilds
    assert not kv.place(batch, [1], [fake_kv(6)])  # longer than the width: the caller rebuilds
    assert kv.place(batch, [1], [c])  # b left; c takes its row, right-aligned
    assert batch.kv_len == [3, 2] and torch.equal(batch.row(1).layers[0][0], c.layers[0][0])
    assert torch.equal(batch.row(0).layers[0][0], a.layers[0][0])  # the other row is untouched
    kv.trim(batch, [0, 1])  # every live row pads the first two columns
    # a view that starts further into the same buffer: nothing was copied
    assert batch.width == 3 and batch.layers[0].buf_k.data_ptr() != start
    assert batch.layers[0].buf_k.untyped_storage().data_ptr() == storage
    assert torch.equal(batch.row(0).layers[0][1], a.layers[0][1]) and torch.equal(batch.row(1).layers[0][0],
                                                                                 c.layers[0][0])
    mask, pos = batch.decode_inputs("cpu")
    assert mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]] and pos.tolist() == [[3], [2]]
    with torch.inference_mode():  # a decode step outgrows the slabs: they become inference tensors
        for layer in batch.layers:
            layer.update(torch.zeros(2, 1, 200, 2), torch.zeros(2, 1, 200, 2))
    batch.kv_len = [n + 200 for n in batch.kv_len]
    assert batch.layers[0].buf_k.is_inference()
    assert kv.place(batch, [1], [fake_kv(4, 5.0)])  # written outside inference mode, as the scheduler does
    assert torch.equal(batch.row(1).layers[0][0], fake_kv(4, 5.0).layers[0][0])
    kv.trim(batch, [1])  # row 0 is not live: the view narrows to row 1's four columns
    assert batch.width == 4 and torch.equal(batch.row(1).layers[0][1], fake_kv(4, 5.0).layers[0][1])


# ---------------------------------------------------------------- sampling
def test_top_p_keeps_the_nucleus_and_renormalises():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    logp = sampling_logprobs(logits, SamplingParams(top_p=0.7))
    assert torch.isinf(logp[2]) and torch.isinf(logp[3])
    assert torch.allclose(logp[:2].exp(), torch.tensor([0.625, 0.375]))
    greedy = draw(logits, SamplingParams(temperature=0.0, logprobs=2), make_generator(0, "cpu"))
    assert greedy.token == 0 and greedy.logprob == pytest.approx(float(torch.log(torch.tensor(0.5))))
    assert [t for t, _ in greedy.top] == [0, 1]


@pytest.mark.parametrize("temperature, top_p, scale", [(0.2, 0.9, 3.0), (1.0, 0.95, 3.0), (1.0, 0.9, 0.01)])
def test_batched_nucleus_draws_follow_the_sampling_distribution(temperature, top_p, scale):
    """The batch's nucleus search among the top candidates samples the distribution ``sampling_logprobs``
    describes, reports its logprobs, and falls back to the whole vocabulary when the nucleus is wider
    (scale 0.01: nearly flat logits over 500 tokens)."""
    from mindforge.engine.sampling import NUCLEUS_K, draw_batch

    torch.manual_seed(0)
    logits_B_V = torch.randn(3, 500) * scale
    params = [SamplingParams(temperature=temperature, top_p=top_p, logprobs=1)] * 3
    want_B_V = torch.stack([sampling_logprobs(row, params[0]) for row in logits_B_V])
    gens = [make_generator(b, "cpu") for b in range(3)]
    counts = torch.zeros(3, 500)
    for _ in range(3000):
        for b, d in enumerate(draw_batch(logits_B_V, params, gens)):
            assert d.logprob == pytest.approx(float(want_B_V[b, d.token]), abs=1e-4)
            assert d.top[0][1] == pytest.approx(float(want_B_V[b].max()), abs=1e-4)
            counts[b, d.token] += 1
    kept = torch.isfinite(want_B_V)
    assert (counts[~kept] == 0).all()
    assert ((kept.sum(-1) > NUCLEUS_K) == (scale < 1)).all()  # the flat case takes the fallback
    freq = counts / counts.sum(-1, keepdim=True)
    assert (freq - want_B_V.exp()).abs().max() < 0.03


def test_seeded_draws_repeat():
    logits = torch.randn(50)
    params = SamplingParams(temperature=1.3)
    first = [draw(logits, params, g).token for g in [make_generator(7, "cpu")] for _ in range(20)]
    again = [draw(logits, params, g).token for g in [make_generator(7, "cpu")] for _ in range(20)]
    assert first == again


# ---------------------------------------------------------------- scheduler
def test_logprobs_match_teacher_forced_reference_in_a_mixed_batch(engine, tiny):
    ids = prompt(engine, "the quick brown fox jumps over")
    futures = {name: engine.submit(GenerationRequest(name, ids, SamplingParams(max_tokens=12, seed=5, logprobs=1)))
               for name in ("A", "B", "tiny")}
    for name, fut in futures.items():
        choice = fut.result(60).choices[0]
        ref = reference_logprobs(tiny, None if name == "tiny" else name, ids + choice.token_ids)[len(ids) - 1:]
        assert torch.allclose(torch.tensor(choice.logprobs), ref, atol=1e-4), name
    assert engine.metrics.batch_size.total > engine.metrics.batch_size.count  # some step ran >1 row


def test_an_adapter_whose_b_is_zero_runs_as_the_base_model_and_takes_no_columns(tiny, tmp_path):
    fresh = make_adapter(tiny / "model", tmp_path / "fresh", seed=3, fresh=True)
    sched = Scheduler(EngineModel(tiny / "model"), "tiny")
    sched.preload_adapter("A", tiny / "A")
    rank = sched.model.lora.rank
    info = sched.preload_adapter("fresh", fresh)
    assert sched.model.lora.rank == rank > 0 and info.slot not in sched.model.lora.columns
    sched.start()
    try:
        ids = prompt(sched, "the quick brown fox jumps over")
        futures = {name: sched.submit(GenerationRequest(name, ids, SamplingParams(max_tokens=8, temperature=0.0,
                                                                                    logprobs=1)))
                   for name in ("fresh", "tiny", "A")}
        fresh_out, base_out, a_out = (futures[n].result(60).choices[0] for n in ("fresh", "tiny", "A"))
    finally:
        sched.stop()
    assert fresh_out.token_ids == base_out.token_ids and fresh_out.logprobs == base_out.logprobs
    assert a_out.logprobs != base_out.logprobs


def test_batched_greedy_equals_sequential(engine):
    prompts = [prompt(engine, f"request {i}: " + "abc " * (i + 1)) for i in range(6)]
    names = ["A", "B", "tiny"] * 2
    sequential = [generate(engine, n, p, max_tokens=10, temperature=0).choices[0].token_ids
                  for n, p in zip(names, prompts, strict=True)]
    futs = [engine.submit(GenerationRequest(n, p, SamplingParams(max_tokens=10, temperature=0)))
            for n, p in zip(names, prompts, strict=True)]
    assert [f.result(60).choices[0].token_ids for f in futs] == sequential


def test_second_turn_reuses_the_first_turns_keys_values(engine):
    first_ids = prompt(engine, "user: hello there, tell me a story\nassistant:")
    first = generate(engine, "A", first_ids, max_tokens=8, temperature=0)
    second_ids = first_ids + first.choices[0].token_ids + prompt(engine, "\nuser: more\nassistant:")
    hits = engine.metrics.counters["prefix_cache_hits_total"]
    second = generate(engine, "A", second_ids, max_tokens=4, seed=1, logprobs=0)
    assert engine.metrics.counters["prefix_cache_hits_total"] == hits + 1
    assert second.cached_tokens == len(first_ids) + len(first.choices[0].token_ids) - 1
    other = generate(engine, "B", second_ids, max_tokens=1)  # another adapter: no reuse
    assert other.cached_tokens == 0
    ref = reference_logprobs(engine_dir(engine), "A", second_ids + second.choices[0].token_ids)[len(second_ids) - 1:]
    assert torch.allclose(torch.tensor(second.choices[0].logprobs), ref, atol=1e-4)


def engine_dir(sched: Scheduler) -> Path:
    return sched.model.path.parent


def test_a_reloaded_name_never_hits_the_old_weights_cache(engine, tiny):
    ids = prompt(engine, "a prompt long enough to be worth caching")
    generate(engine, "A", ids, max_tokens=2)
    engine.unload_adapter("A").result(30)
    with pytest.raises(UnknownModel):
        generate(engine, "A", ids, max_tokens=2)
    engine.load_adapter("A", tiny / "B").result(30)  # same name, other weights
    again = generate(engine, "A", ids, max_tokens=2)
    assert again.cached_tokens == 0
    assert generate(engine, "A", ids, max_tokens=2).cached_tokens == len(ids) - 1  # its own entries do hit


def test_n_choices_share_one_prefill_and_differ(engine):
    ids = prompt(engine, "shared prompt for several samples")
    before = engine.metrics.counters["prefill_tokens_total"]
    result = generate(engine, "B", ids, max_tokens=8, n=4, seed=3, temperature=1.5)
    assert engine.metrics.counters["prefill_tokens_total"] - before == len(ids)
    assert [c.index for c in result.choices] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in result.choices}) > 1
    again = generate(engine, "B", ids, max_tokens=8, n=4, seed=3, temperature=1.5)
    assert [c.token_ids for c in again.choices] == [c.token_ids for c in result.choices]


def test_stop_strings_cut_the_text_and_keep_the_token(engine):
    ids = prompt(engine, "count: ")
    free = generate(engine, "tiny", ids, max_tokens=12, temperature=0).choices[0]
    stop = free.text[3:5]
    assert stop
    cut = generate(engine, "tiny", ids, max_tokens=12, temperature=0, stop=(stop,)).choices[0]
    assert cut.finish_reason == "stop" and cut.text == free.text[: free.text.find(stop)]
    assert free.token_ids[: len(cut.token_ids)] == cut.token_ids and len(cut.token_ids) < len(free.token_ids)
    toks = free.token_ids
    k = next((i for i in range(1, len(toks)) if toks[i] not in toks[:i]), 0)
    by_id = generate(engine, "tiny", ids, max_tokens=12, temperature=0, stop_token_ids=(toks[k],))
    assert by_id.choices[0].token_ids == toks[: k + 1] and by_id.choices[0].finish_reason == "stop"


def test_admin_errors_and_unknown_models(engine, tiny):
    with pytest.raises(AdapterNameError, match="already loaded"):
        engine.load_adapter("B", tiny / "B").result(30)
    with pytest.raises(AdapterNameError, match="base model"):
        engine.load_adapter("tiny", tiny / "B").result(30)
    with pytest.raises(AdapterError, match="adapter_config.json"):
        engine.load_adapter("C", tiny / "model").result(30)
    with pytest.raises(UnknownModel):
        engine.unload_adapter("nope").result(30)
    with pytest.raises(UnknownModel, match="'nope'"):
        generate(engine, "nope", [5, 6], max_tokens=2)
    assert generate(engine, "B", [5, 6], max_tokens=2, ignore_eos=True).choices[0].finish_reason == "length"


def test_abandoned_requests_leave_the_batch(engine):
    ids = prompt(engine, "abandon me")
    req = GenerationRequest("A", ids, SamplingParams(max_tokens=400, ignore_eos=True))
    fut = engine.submit(req)
    fut.cancel() or concurrent.futures.wait([fut], timeout=0.1)
    assert generate(engine, "A", ids, max_tokens=3, ignore_eos=True).choices[0].finish_reason == "length"


def test_cli_adapter_specs():
    from mindforge.cli.engine import parse_adapters
    from mindforge.errors import InputError

    assert parse_adapters(["L0=/a", "L1=/b=c"]) == {"L0": Path("/a"), "L1": Path("/b=c")}
    with pytest.raises(InputError, match="--adapter:2: 'L1': expected NAME=PATH"):
        parse_adapters(["L0=/a", "L1"])
    with pytest.raises(InputError, match="given twice"):
        parse_adapters(["L0=/a", "L0=/b"])


def test_importing_the_engine_package_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, mindforge.engine; assert 'torch' not in sys.modules; mindforge.engine.EngineProcess"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- batched prefill, fused forward, metrics
def test_concurrent_prompts_are_prefilled_together_and_match_alone(tiny):
    sched = Scheduler(EngineModel(tiny / "model"), "tiny", prefix_cache_tokens=0)
    sched._load("A", tiny / "A")
    sched._load("B", tiny / "B")
    assert sched.model.uses_fused  # a Llama model: the fused forward serves it
    prompts = [prompt(sched, f"prompt {i}: " + "xyz " * (2 * i + 1)) for i in range(6)]
    names = ["A", "B", "tiny"] * 2
    futures = [sched.submit(GenerationRequest(n, p, SamplingParams(max_tokens=6, temperature=0, logprobs=0)))
               for n, p in zip(names, prompts, strict=True)]
    sched.start()  # every request is queued before the first loop: one admission takes them all
    try:
        together = [f.result(60).choices[0] for f in futures]
        assert sched.metrics.counters["prefill_batches_total"] == 1
        assert sched.metrics.counters["requests_total"] == 6
        alone = [generate(sched, n, p, max_tokens=6, temperature=0).choices[0]
                 for n, p in zip(names, prompts, strict=True)]
    finally:
        sched.stop()
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    for name, ids, choice in zip(names, prompts, together, strict=True):
        ref = reference_logprobs(tiny, None if name == "tiny" else name, ids + choice.token_ids)[len(ids) - 1:]
        assert torch.allclose(torch.tensor(choice.logprobs), ref, atol=1e-4), name


def test_identical_prompts_admitted_together_share_one_prefill_and_sample_as_alone(tiny):
    sched = Scheduler(EngineModel(tiny / "model"), "tiny", prefix_cache_tokens=0)  # no cache: only sharing reuses
    sched._load("A", tiny / "A")
    sched._load("B", tiny / "B")
    ids = prompt(sched, "one task, four attempts, each its own session and seed")
    params = [("A", 1), ("A", 2), ("A", 3), ("B", 1), ("A", 1)]  # B: same prompt, other adapter: not shared
    futures = [sched.submit(GenerationRequest(n, ids, SamplingParams(max_tokens=6, temperature=1.2, seed=s,
                                                                      logprobs=0)))
               for n, s in params]
    sched.start()  # all queued before the first loop: one admission takes them all
    try:
        together = [f.result(60) for f in futures]
        counters = dict(sched.metrics.counters)
        alone = [generate(sched, n, ids, max_tokens=6, temperature=1.2, seed=s, logprobs=0) for n, s in params]
    finally:
        sched.stop()
    assert counters["prefill_batches_total"] == 1
    assert counters["requests_total"] == 5 and counters["prompt_tokens_total"] == 5 * len(ids)
    assert counters["prefill_tokens_total"] == 2 * len(ids)  # one prefill for A's four, one for B's
    assert counters["prefill_shared_total"] == 3
    assert [r.cached_tokens for r in together] == [0, len(ids), len(ids), 0, len(ids)]
    assert [r.choices[0].token_ids for r in together] == [r.choices[0].token_ids for r in alone]
    for t, a in zip(together, alone, strict=True):
        assert torch.allclose(torch.tensor(t.choices[0].logprobs), torch.tensor(a.choices[0].logprobs), atol=1e-5)
    assert together[0].choices[0].token_ids == together[4].choices[0].token_ids  # same seed, same sample
    assert len({tuple(r.choices[0].token_ids) for r in together[:3]}) > 1


def test_chunked_prefill_gives_the_whole_prompt_logits(tiny):
    from mindforge.engine.model import PrefillJob

    model = EngineModel(tiny / "model")
    model.load_adapter(tiny / "A")
    geo = model.geometry
    ids = [prompt_ids for prompt_ids in (model.tokenizer.encode("a longer prompt that spans chunks " * 3),
                                         model.tokenizer.encode("and a short one"))]

    def jobs() -> list[PrefillJob]:
        return [PrefillJob(p, 0, kv.empty_cache(geo.num_layers, geo.kv_heads, geo.head_dim, len(p),
                                                 dtype=model.dtype, device=model.device), slot)
                for p, slot in zip(ids, ["s0", "__base__"], strict=True)]

    whole, chunked = jobs(), jobs()
    logits_whole = model.prefill(whole, chunk=4096)
    logits_chunked = model.prefill(chunked, chunk=7)  # the first prompt runs in pieces across forwards
    assert torch.allclose(logits_whole, logits_chunked, atol=1e-5)
    for a, b in zip(whole, chunked, strict=True):
        assert torch.allclose(kv.row_from_slabs(a.layers).layers[-1][0], kv.row_from_slabs(b.layers).layers[-1][0],
                              atol=1e-5)
    ref = torch.log_softmax(logits_whole[0], -1)
    expect = reference_logprobs(tiny, "A", ids[0] + [int(ref.argmax())])[-1]
    assert float(ref.max()) == pytest.approx(float(expect), abs=1e-4)


def test_metrics_report_rates_batch_and_step_time(engine):
    futs = [engine.submit(GenerationRequest("A", prompt(engine, f"rate {i}"),
                                            SamplingParams(max_tokens=8, ignore_eos=True))) for i in range(4)]
    for f in futs:
        f.result(60)
    m = engine.metrics
    m.update_rates()
    assert m.gauges["generation_tokens_per_second"] > 0 and m.gauges["decode_step_seconds"] > 0
    assert 1 <= m.gauges["mean_decode_batch"] <= 4
    c = m.counters
    assert c["decode_seconds_total"] > 0 and c["prefill_seconds_total"] > 0 and c["prefill_batches_total"] >= 1
    text = m.render()
    for name in ("generation_tokens_per_second", "mean_decode_batch", "decode_step_seconds", "decode_seconds_total"):
        assert f"mindforge_engine_{name} " in text


def test_rows_that_finish_early_stay_as_dead_rows_without_changing_the_others(tiny):
    sched = Scheduler(EngineModel(tiny / "model"), "tiny", prefix_cache_tokens=0)
    sched._load("A", tiny / "A")
    prompts = [prompt(sched, f"row {i} " + "pq " * i) for i in range(8)]
    lengths = [3, 12, 12, 5, 12, 12, 12, 12]  # two of eight leave early: a quarter, kept in place
    reqs = [GenerationRequest("A" if i % 2 else "tiny", p, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))]
    futures = [sched.submit(r) for r in reqs]
    sched.start()
    try:
        together = [f.result(60).choices[0].token_ids for f in futures]
        # live rows only: every decode step adds one token to each of them
        assert sched.metrics.batch_size.count == 11 and sched.metrics.batch_size.total == sum(lengths) - len(lengths)
        alone = [generate(sched, r.model, r.prompt_ids, max_tokens=r.params.max_tokens, temperature=0,
                          ignore_eos=True).choices[0].token_ids for r in reqs]
    finally:
        sched.stop()
    assert together == alone and [len(t) for t in together] == lengths


def test_requests_that_arrive_one_at_a_time_join_in_place_with_the_same_tokens(tiny):
    """A request admitted while others decode takes the place of a finished row (no rebuild of the batch)
    and gets the tokens it gets alone; the rows already there are unchanged."""
    sched = Scheduler(EngineModel(tiny / "model"), "tiny", prefix_cache_tokens=0)
    sched._load("A", tiny / "A")

    def request(i: int, n: int, words: int) -> GenerationRequest:
        return GenerationRequest("A" if i % 2 else "tiny", prompt(sched, f"join {i} " + "pq " * words),
                                 SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))

    def loop() -> None:  # one pass of the scheduler's loop, driven here
        sched._drain(block=False)
        sched._regroup(sched._admit())
        if sched._rows:
            sched._step()

    # two of eight finish early: a quarter, left in place while nobody joins
    first = [request(i, n, 6) for i, n in enumerate([2, 14, 14, 3, 14, 14, 14, 14])]
    for r in first:
        sched.submit(r)
    loop()  # a new batch: its one rebuild
    for _ in range(3):
        loop()  # rows 0 and 3 finish and stay as dead rows
    late = [request(8, 6, 0), request(9, 5, 1)]  # shorter prompts than the batch's width
    for r in late:
        sched.submit(r)
    loop()
    assert sched.metrics.counters["batch_rebuilds_total"] == 1
    assert {id(sched._rows[0].request), id(sched._rows[3].request)} == {id(r) for r in late}
    while not all(r.future.done() for r in first + late):
        loop()
    assert sched.metrics.counters["batch_rebuilds_total"] == 1
    got = [r.future.result().choices[0].token_ids for r in first + late]
    sched.start()
    try:
        alone = [generate(sched, r.model, r.prompt_ids, max_tokens=r.params.max_tokens, temperature=0,
                          ignore_eos=True).choices[0].token_ids for r in first + late]
    finally:
        sched.stop()
    assert got == alone and [len(t) for t in got] == [2, 14, 14, 3, 14, 14, 14, 14, 6, 5]
