"""The embedded engine, measured side by side in one run, on the real default model.

0. Throughput at 1, 8, 32 and 64 concurrent requests: 64-token greedy
   completions (``ignore_eos``), adapters L0-L3 mixed, tokens/s of each level
   (goals: one stream >= 25 tok/s, 64 concurrent >= 400 tok/s), with the
   engine's own mean decode batch and seconds a step from ``/metrics``.
   ``--other-url`` sends the same prompts, after the embedded engine, to a second
   OpenAI-compatible engine serving the same base model (the adapters are
   loaded into it through the same ``/v1/load_lora_adapter`` contract when it
   does not list them) and prints the embedded engine's ratio to it;
   ``--vllm`` starts vLLM's CPU build through the project's own backend
   (``EngineProcess(backend="vllm")``, the same dtype and adapters) and
   measures it the same way, after the embedded engine (one engine at a
   time: ``throughput_of`` says why). ``--dtype bfloat16`` runs both engines in
   bfloat16 (``settings.engine_dtype``; default float32, the trainer's).
1. Batched against sequential generation: the same 8 greedy requests (adapters
   L0-L3 mixed, a fixed number of tokens each) sent one after another, then
   all at once. Prints tokens/s of each and the ratio (goal: >= 3x).
2. Second-turn prefill with the prefix cache against without: a conversation's
   second turn (first prompt + answer + a new message) on the adapter that
   served the first turn (its keys/values are cached) and on a second name
   loaded from the same folder (nothing cached, same weights). Prints the
   time ratio (goal: <= 0.3x) for a short chat and for an agent-sized system
   prompt: a forward pass has a fixed cost no cache removes.
3. Proxy overhead per hop, engine time subtracted: chat turns through the
   proxy's app over the same engine; the engine's own counters give its time
   and hop count. Prints the overhead and its ratio to the engine's time.

    .venv/bin/python benchmarks/serving.py [--levels 1,8,32,64] [--rounds 3] [--vllm] [--other-url URL] [--only throughput]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mindforge.engine.launch import EngineProcess
from mindforge.engine.metrics import parse_metrics
from mindforge.engine.registry import init_adapters
from mindforge.paths import default_hcp_path
from mindforge.settings import ENGINE_DTYPES, load_settings

ROUTES = ("L0", "L1", "L2", "L3")
TOPICS = ["rivers", "prime numbers", "sorting", "volcanoes", "bread", "chess", "tides", "compilers"]


def complete(client: httpx.Client, **body) -> dict:
    r = client.post("/v1/completions", json=body)
    r.raise_for_status()
    return r.json()


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible engine serving the default model with adapters ``ROUTES`` under those names."""

    name: str
    url: str


def ensure_adapters(client: httpx.Client, adapters: dict[str, Path]) -> None:
    listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
    for name, path in adapters.items():
        if name not in listed:
            client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}).raise_for_status()


def burst(client: httpx.Client, concurrent: int, tokens: int, tag: str) -> float:
    """Tokens/s of ``concurrent`` greedy completions sent at once (wall time from the first send to the last answer)."""
    def one(i: int) -> int:
        # the tag comes first: no request shares a cached prefix with an earlier burst's
        body = complete(client, model=ROUTES[i % 4], prompt=f"[{tag}-{i}] Write a short note about {TOPICS[i % 8]}.",
                        max_tokens=tokens, temperature=0, ignore_eos=True)
        return body["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrent) as pool:
        total = sum(pool.map(one, range(concurrent)))
    return total / (time.perf_counter() - t0)


def decode_stats(client: httpx.Client) -> tuple[float, float, float]:
    m = parse_metrics(client.get("/metrics").text)
    return (m["mindforge_engine_decode_steps_total"], m["mindforge_engine_batch_size_sum"],
            m["mindforge_engine_decode_seconds_total"])


Rates = dict[int, tuple[list[float], str]]  # level -> tok/s of each round, the engine's own step figures


def throughput_of(target: Target, levels: list[int], tokens: int, rounds: int, engine_stats: bool) -> Rates:
    """Each level ``rounds`` times on one target, the same prompts every target gets.

    Targets are measured one after the other, each with the machine to itself:
    vLLM's CPU worker keeps a core busy for a while after it answers (seen here:
    both engines' processes near 100% CPU while only the embedded engine had
    requests), so levels alternated between two live engines measured the
    embedded engine's single stream at 3 tok/s instead of ~15.
    """
    out: Rates = {}
    with httpx.Client(base_url=target.url, timeout=1800) as client:
        for level in levels:
            before = decode_stats(client) if engine_stats else None
            rates = [burst(client, level, tokens, tag=f"{level}.{r}") for r in range(rounds)]
            note = ""
            if before is not None:
                steps, rows, secs = (a - b for a, b in zip(decode_stats(client), before, strict=True))
                note = f" (mean decode batch {rows / max(steps, 1):.1f}, {secs / max(steps, 1) * 1000:.0f} ms a step)"
            out[level] = (rates, note)
            print(f"  {target.name}, {level:>2} concurrent: {statistics.median(rates):.1f} tok/s{note}", flush=True)
    return out


def report_throughput(results: dict[str, Rates], levels: list[int], tokens: int, rounds: int) -> None:
    """One line a level: the first target's median tok/s and its ratio to each other target's."""
    names = list(results)
    first = names[0]
    for level in levels:
        med = {n: statistics.median(results[n][level][0]) for n in names}
        line = f"throughput, {level:>2} concurrent x {tokens} tokens: {first} {med[first]:.1f} tok/s{results[first][level][1]}"
        for n in names[1:]:
            line += f"; {n} {med[n]:.1f} tok/s, ratio {med[first] / med[n]:.2f}x"
        if rounds > 1:
            line += "  [rounds: " + "; ".join(f"{n} {' '.join(f'{x:.0f}' for x in results[n][level][0])}"
                                          for n in names) + "]"
        print(line, flush=True)


def batched_vs_sequential(client: httpx.Client, tokens: int) -> tuple[float, float]:
    def one(i: int) -> int:
        body = complete(client, model=ROUTES[i % 4], prompt=f"Write a short note about {TOPICS[i]}.",
                        max_tokens=tokens, temperature=0, ignore_eos=True)
        return body["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    seq_tokens = sum(one(i) for i in range(8))
    seq_tps = seq_tokens / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        bat_tokens = sum(pool.map(one, range(8)))
    bat_tps = bat_tokens / (time.perf_counter() - t0)
    return seq_tps, bat_tps


def conversation(tokenizer, i: int, system_repeats: int) -> list[int]:
    # unique from the first token: no conversation may hit another's cached prefix
    system = f"Session {i}. " + ("You are a careful assistant. Answer with short, correct statements. "
                                 * system_repeats).strip()
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": f"Conversation {i}: explain how {TOPICS[i % 8]} work, step by step."}]
    return tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)


def second_turn(client: httpx.Client, tokenizer, i: int, twin: str,
                system_repeats: int) -> tuple[list[int], float, float]:
    """(second-turn ids, seconds on the cached adapter, seconds on ``twin``, a fresh name for the same weights)."""
    first = conversation(tokenizer, i, system_repeats)
    answer = complete(client, model="L1", prompt=first, max_tokens=32, temperature=0, ignore_eos=True,
                      return_token_ids=True)["choices"][0]["token_ids"]
    follow = tokenizer.encode("<|im_end|>\n<|im_start|>user\nAnd why does that matter?<|im_end|>\n"
                              "<|im_start|>assistant\n")
    ids = first + answer + follow
    timings = {}
    for name in ("L1", twin):
        t0 = time.perf_counter()
        body = complete(client, model=name, prompt=ids, max_tokens=1, temperature=0)
        timings[name] = time.perf_counter() - t0
        cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert (cached > 0) == (name == "L1"), (name, cached)
    return ids, timings["L1"], timings[twin]


def proxy_overhead_per_hop(engine_url: str, model_path: Path, adapters: dict[str, Path],
                           turns: int = 6) -> tuple[float, float]:
    """(seconds a hop spends outside the engine, engine seconds a hop), through ``mindforge serve``'s app.

    Chat turns go one at a time through the proxy (its real app on uvicorn,
    the default HCP, its served adapter names loaded from the same folders);
    the engine's ``request_seconds_total`` and ``requests_total`` counters give
    the engine time and hop count, so what is left of the wall time is the
    proxy's: HTTP in and out, harness rendering and routing, the engine client.
    """
    import socket
    import threading

    import uvicorn

    from mindforge.harness import open_harness
    from mindforge.harness.proxy import create_app
    from mindforge.hcp import load_hcp

    hcp = load_hcp(default_hcp_path())
    with httpx.Client(base_url=engine_url, timeout=600) as engine:
        for route in hcp.router.routes:
            engine.post("/v1/load_lora_adapter", json={"lora_name": hcp.served_adapter(route),
                                                       "lora_path": str(adapters[route])}).raise_for_status()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(open_harness(hcp, engine_url, model_path)), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    proxy = httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=600)
    engine = httpx.Client(base_url=engine_url, timeout=60)
    try:
        def counters() -> tuple[float, float]:
            m = parse_metrics(engine.get("/metrics").text)
            return m["mindforge_engine_request_seconds_total"], m["mindforge_engine_requests_total"]

        wall = engine_s = hops = 0.0
        for i in range(turns + 1):  # the first turn warms the proxy up and is not counted
            s0, n0 = counters()
            t0 = time.perf_counter()
            proxy.post("/v1/chat/completions", json={"model": hcp.provider.model, "max_tokens": 16, "messages": [
                {"role": "user", "content": f"Name one fact about {TOPICS[i % 8]}."}]}).raise_for_status()
            dt = time.perf_counter() - t0
            s1, n1 = counters()
            if i:
                wall, engine_s, hops = wall + dt, engine_s + s1 - s0, hops + n1 - n0
    finally:
        proxy.close()
        engine.close()
        server.should_exit = True
        thread.join(10)
    return (wall - engine_s) / hops, engine_s / hops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,8,32,64", help="concurrent requests of the throughput section")
    ap.add_argument("--throughput-tokens", type=int, default=64, help="tokens each throughput request generates")
    ap.add_argument("--vllm", action="store_true",
                    help="also start vLLM's CPU build through the project's own backend (make setup VLLM=1) "
                         "and send it the same throughput prompts")
    ap.add_argument("--other-url", help="a second OpenAI-compatible engine to send the throughput prompts to")
    ap.add_argument("--other-name", default="other", help="its name in the output")
    ap.add_argument("--rounds", type=int, default=1, help="times each level runs on each target (medians)")
    ap.add_argument("--only", choices=("all", "throughput"), default="all", help="run only the throughput section")
    ap.add_argument("--tokens", type=int, default=48, help="tokens each of the 8 batched/sequential requests generates")
    ap.add_argument("--repeats", type=int, default=3, help="conversations timed for the prefix cache")
    ap.add_argument("--dtype", choices=ENGINE_DTYPES, help="both engines' dtype (default: settings.engine_dtype)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    settings = load_settings()
    if args.dtype:
        settings = settings.model_copy(update={"engine_dtype": args.dtype})
    print(f"engines compute in {settings.engine_dtype}", flush=True)
    from mindforge.engine.registry import resolve_model

    model_path = resolve_model(settings.model, settings)
    with tempfile.TemporaryDirectory(prefix="mf-bench-") as tmp:
        adapters = init_adapters(model_path, Path(tmp), ROUTES)
        # the batch must hold the largest level, or the throughput section measures the queue
        with EngineProcess(settings.model, adapters, settings=settings,
                           extra_args=("--max-batch", str(max(levels)))) as eng, \
                httpx.Client(base_url=eng.url, timeout=600) as client, ExitStack() as stack:
            complete(client, model="L0", prompt="warm up", max_tokens=4)
            results = {"embedded": throughput_of(Target("embedded", eng.url), levels, args.throughput_tokens,
                                                 args.rounds, engine_stats=True)}
            if args.vllm:
                # Started like every other engine of the project, once the embedded engine's levels are done
                # (throughput_of says why not beside it).
                started = time.perf_counter()
                vllm = stack.enter_context(EngineProcess(settings.model, adapters, settings=settings, backend="vllm"))
                print(f"vLLM ({settings.engine_dtype}, the project's backend) answered /health {time.perf_counter() - started:.0f} s "
                      "after start", flush=True)
                with httpx.Client(base_url=vllm.url, timeout=600) as other:
                    complete(other, model="L0", prompt="warm up", max_tokens=4)
                results["vllm"] = throughput_of(Target("vllm", vllm.url), levels, args.throughput_tokens, args.rounds,
                                                engine_stats=False)
                stack.close()  # vLLM down before anything else is measured
            if args.other_url:
                with httpx.Client(base_url=args.other_url, timeout=600) as other:
                    ensure_adapters(other, adapters)
                    complete(other, model="L0", prompt="warm up", max_tokens=4)
                results[args.other_name] = throughput_of(Target(args.other_name, args.other_url), levels,
                                                         args.throughput_tokens, args.rounds, engine_stats=False)
            report_throughput(results, levels, args.throughput_tokens, args.rounds)
            if args.only == "all":
                other_sections(client, eng.url, model_path, adapters, args)


def other_sections(client: httpx.Client, engine_url: str, model_path: Path, adapters: dict[str, Path],
                   args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    seq_tps, bat_tps = batched_vs_sequential(client, args.tokens)
    print(f"generation, 8 requests x {args.tokens} tokens: sequential {seq_tps:.1f} tok/s, "
          f"batched {bat_tps:.1f} tok/s, ratio {bat_tps / seq_tps:.2f}x (goal >= 3x)")
    # A forward pass has a fixed cost (every weight is read once) that no cache removes, so the
    # ratio depends on how long the cached part is: a short chat and an agent-sized system prompt.
    for size, system_repeats in (("short", 12), ("agent-sized", 60)):
        runs = []
        for i in range(args.repeats):  # a fresh twin name each time: its cache starts empty
            twin = f"L1-twin-{size}-{i}"
            client.post("/v1/load_lora_adapter", json={"lora_name": twin, "lora_path": str(adapters["L1"])})
            runs.append(second_turn(client, tokenizer, i + 100 * system_repeats, twin, system_repeats))
        hit = statistics.median(r[1] for r in runs)
        miss = statistics.median(r[2] for r in runs)
        print(f"second-turn prefill, {size}, {len(runs[0][0])} prompt tokens: with prefix cache "
              f"{hit * 1000:.0f} ms, without {miss * 1000:.0f} ms, ratio {hit / miss:.2f}x (goal <= 0.3x)")
    m = parse_metrics(client.get("/metrics").text)
    print(f"engine: {m['mindforge_engine_prefix_cache_hits_total']:.0f} prefix hits, "
          f"{m['mindforge_engine_prefill_tokens_saved_total']:.0f} prefill tokens saved, mean decode batch "
          f"{m['mindforge_engine_batch_size_sum'] / max(1, m['mindforge_engine_batch_size_count']):.2f}")
    overhead, engine_hop = proxy_overhead_per_hop(engine_url, model_path, adapters)
    print(f"proxy overhead per hop (engine time subtracted): {overhead * 1000:.1f} ms, engine time per hop "
          f"{engine_hop * 1000:.0f} ms, overhead/engine {overhead / engine_hop:.3f}x")


if __name__ == "__main__":
    main()
