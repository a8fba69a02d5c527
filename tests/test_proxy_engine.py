"""The proxy and harness over a real engine and the real default model: the embedded engine, then vLLM.

Every openai-client test runs against both upstreams (vLLM's CPU build is the session's, started by
the project's own backend, conftest.py); the two that read the embedded engine's own metrics or
cost minutes per run (fifty concurrent conversations) run on the embedded engine only.
One engine and one proxy for each; answers are kept to a few tokens
(the HCP is the default one with small max_tokens and greedy answers) so the
whole module stays within minutes on two busy cores.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time

import httpx
import openai
import pytest
from harness_fakes import make_hcp, model_path

from mindforge.harness import EngineClient, open_harness
from mindforge.harness import conversations as conv
from mindforge.harness.proxy import create_app
from mindforge.harness.wire import Message
from mindforge.settings import load_settings

MODEL = "smollm2-135m-instruct"
KEY = "sk-engine-test"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
EXAMPLE = [
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_ex", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_ex", "content": '{"sky": "rain"}'},
    {"role": "assistant", "content": "It rains in Rome."},
]
SLIM = {  # short prompts: every prefill costs on two shared cores
    "/router/identity": "You are MindForge-Small.",
    "/router/route_prompt": "Which specialist fits the request above?\n{{LORA_DESCRIPTIONS}}\n"
                            "Reply with one label from {{ROUTE_LABELS}}.",
    "/router/routes/L0/description": "chat", "/router/routes/L1/description": "tool calls",
    "/router/routes/L2/description": "Python code", "/router/routes/L3/description": "HTML",
    "/agents_md": "", "/skills": [], "/system/L0": "Be brief.", "/system/L2": "Write Python.",
    "/system/L3": "Write HTML.", "/system/L1": "Call tools in the format shown.",
}
SMALL = [*({"op": "replace", "path": k, "value": v} for k, v in SLIM.items()),
    {"op": "replace", "path": "/tunable/2/min", "value": 1},
    {"op": "replace", "path": "/provider/sampling/answer/max_tokens", "value": 12},
    {"op": "replace", "path": "/provider/sampling/answer/temperature", "value": 0.0},
    {"op": "replace", "path": "/provider/sampling/summary/max_tokens", "value": 6},
]


class Recording(EngineClient):
    """The real client, keeping (adapter, prompt ids) of every call: what the engine saw."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    async def complete(self, *, model, prompt_ids, **kw):
        out = await super().complete(model=model, prompt_ids=prompt_ids, **kw)
        self.calls.append((model, tuple(out[0].prompt_ids)))
        return out


@pytest.fixture(scope="module", params=["embedded", pytest.param("vllm", marks=pytest.mark.vllm)])
def engine(request, tmp_path_factory):
    """The proxy's upstream: the embedded engine, then vLLM's CPU build (the session's, conftest.py)."""
    if request.param == "vllm":
        yield request.getfixturevalue("vllm_server")[0]
        return
    from mindforge.engine import EngineProcess
    from mindforge.engine.registry import init_adapters

    hcp = make_hcp(SMALL)
    folders = init_adapters(model_path(), tmp_path_factory.mktemp("adapters"))
    with EngineProcess(MODEL, {hcp.served_adapter(r): p for r, p in folders.items()}, settings=load_settings()) as eng:
        yield eng


def embedded_only(engine, why: str) -> None:
    if engine.backend != "embedded":
        pytest.skip(f"embedded engine only: {why}")


@pytest.fixture(scope="module")
def proxy(engine):
    import uvicorn

    client = Recording(engine.url, timeout_s=1800)  # 50 conversations queue on two shared cores
    harness = open_harness(make_hcp(SMALL), engine.url, model_path(), client=client)
    app = create_app(harness, api_key=KEY)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    while not server.started:
        time.sleep(0.05)
    yield url, harness, client
    server.should_exit = True
    thread.join(10)


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0, timeout=600)


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    return float(re.search(rf"^mindforge_engine_{name} (\S+)$", text, re.MULTILINE).group(1))


def test_chat_turn_and_streaming(proxy) -> None:
    url, _, _ = proxy
    client = oai(url)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}])
    assert reply.choices[0].message.content and reply.model == MODEL and "mf-L" not in reply.model_dump_json()
    chunks = list(client.chat.completions.create(model=MODEL, stream=True, messages=[
        {"role": "user", "content": "Say hello."}, {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": "Now say goodbye."}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks).strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_responses_continuation(proxy) -> None:
    url, _, client_rec = proxy
    client = oai(url)
    one = client.responses.create(model=MODEL, input="My name is Ada. Say hi.")
    n = len(client_rec.calls)
    two = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=one.id)
    assert one.output_text and two.output_text is not None and two.previous_response_id == one.id
    answer_prompt = client_rec.calls[n:][1][1]  # route hop, then the answer hop
    assert "My name is Ada" in proxy[1].renderer.decode(answer_prompt)  # the first turn is in the second's view


def test_tool_call_round_trip_continues_on_the_same_adapter(proxy) -> None:
    url, harness, rec = proxy
    client = oai(url)
    # an in-context example in the client's history (rebuilt by the proxy) shows the model the format
    msgs = [*EXAMPLE, {"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=40)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    call = choice.message.tool_calls[0]
    assert call.function.name  # the small model may misname the tool; the round trip is what is tested
    adapter = rec.calls[-1][0]
    n = len(rec.calls)
    msgs += [choice.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "celsius": 21}'}]
    client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=12)
    after = rec.calls[n:]
    assert after and after[0][0] == adapter  # no route hop: the first call after the result is the answer
    prev = next(p for m, p in reversed(rec.calls[:n]) if m == adapter)
    assert after[0][1][: len(prev)] == prev and '"celsius": 21' in harness.renderer.decode(after[0][1])


def test_reentered_adapter_prefix_is_identical_and_the_engine_prefix_cache_hits(engine) -> None:
    embedded_only(engine, "reads the embedded engine's own prefix-cache metrics")
    harness = open_harness(make_hcp(SMALL), engine.url, model_path())

    async def go():
        s = harness.new_session()
        a = await harness.turn(s, "Write a Python function add(a, b).", route="L2")
        await harness.turn(s, "Make an HTML button labelled Go.", route="L3")
        hits = metric(engine.url, "prefix_cache_hits_total")
        saved = metric(engine.url, "prefill_tokens_saved_total")
        c = await harness.turn(s, "Now write sub(a, b).", route="L2")
        return a, c, hits, saved

    a, c, hits, saved = asyncio.run(go())
    first = list(a.hops[0].prompt_ids) + list(a.hops[0].completion_ids)
    assert list(c.hops[0].prompt_ids[: len(first)]) == first
    assert metric(engine.url, "prefix_cache_hits_total") > hits
    assert metric(engine.url, "prefill_tokens_saved_total") - saved >= len(first) - 1


def test_training_ids_equal_engine_ids_after_a_tool_call(engine) -> None:
    harness = open_harness(make_hcp(SMALL), engine.url, model_path())
    results = []

    async def execute(name, args):
        results.append((name, args))
        return {"sky": "sunny"}

    history = [Message(**m) for m in EXAMPLE]  # an in-context example of the call format, on L0

    async def go():
        return await harness.turn(conv.rebuild(harness, history), "What is the weather in Paris?",
                                  tools=TOOLS, tool_executor=execute, route="L0", max_tokens=40)

    rec = asyncio.run(go())
    assert results, rec.hops[0].text  # any call the model wrote was executed (its name may be wrong)
    answers = [h for h in rec.hops if h.kind == "answer"]
    assert len(answers) >= 2
    first, second = answers[0], answers[1]
    # training ids of the first hop = prompt + completion exactly as sent/returned, and the next hop extends them
    train_ids = list(first.prompt_ids) + list(first.completion_ids)
    assert list(second.prompt_ids[: len(train_ids)]) == train_ids
    assert len(first.logprobs) == len(first.completion_ids) and all(lp <= 0 for lp in first.logprobs)


@pytest.mark.timeout(2400)  # 300 engine calls; measured over 860 s on two cores shared with other test runs
def test_fifty_concurrent_conversations_do_not_cross_talk(proxy, engine) -> None:
    # Cross-talk is the proxy's and harness's property, whatever the upstream: run once, where it is cheapest.
    embedded_only(engine, "300 calls take over ten minutes on two CPU cores")
    url, harness, rec = proxy
    client = openai.AsyncOpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0, timeout=1800)
    words = [f"zq{i:02d}x" for i in range(50)]
    n = len(rec.calls)

    async def conversation(word):
        msgs = [{"role": "user", "content": f"The code word is {word}. Say OK."}]
        one = await client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2)
        msgs += [{"role": "assistant", "content": one.choices[0].message.content},
                 {"role": "user", "content": "Repeat the code word."}]
        await client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2)

    async def go():
        await asyncio.gather(*(conversation(w) for w in words))

    asyncio.run(go())
    seen = [harness.renderer.decode(p) for _, p in rec.calls[n:]]
    assert len(seen) >= 50 * 4
    for text in seen:
        present = {w for w in words if w in text}
        assert len(present) <= 1, f"a prompt mixes conversations: {sorted(present)}"
    second_turns = [t for t in seen if "Repeat the code word." in t and "model_id=" not in t[-40:]]
    assert len(second_turns) >= 50 and all(any(w in t for w in words) for t in second_turns)


def test_bad_input_and_engine_down_keep_the_server_serving(proxy, engine) -> None:
    url = proxy[0]
    h = {"Authorization": f"Bearer {KEY}"}
    bad = httpx.post(url + "/v1/chat/completions", headers=h, json={"model": MODEL, "messages": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
    unknown = httpx.post(url + "/v1/chat/completions", headers=h,
                         json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    down_harness = open_harness(make_hcp(SMALL), "http://127.0.0.1:9", model_path(), client=EngineClient("http://127.0.0.1:9",
                                                                                             backoff_s=0.01))
    down = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(down_harness, api_key=None)),
                             base_url="http://p")
    resp = asyncio.run(down.post("/v1/chat/completions",
                                 json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}))
    assert resp.status_code == 502 and "unavailable" in resp.json()["error"]["message"]
    health = asyncio.run(down.get("/health"))
    assert health.status_code == 503 and "127.0.0.1:9" in health.json()["upstream"]["error"]
    assert httpx.get(url + "/health").json()["upstream"]["ok"] is True
    ok = oai(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Still there?"}])
    assert ok.choices[0].message.content is not None


def test_mindforge_serve_process_over_the_engine(engine, tmp_path) -> None:
    """The real command: key file, HCP file, upstream URL; /health sees the engine; a chat turn answers."""
    import json
    import os
    import subprocess
    import sys

    hcp_file, key_file = tmp_path / "small.hcp.json", tmp_path / "proxy.key"
    hcp_file.write_text(json.dumps(make_hcp(SMALL).to_document()))
    key_file.write_text("sk-cli-test\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "MINDFORGE_API_KEY"}
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "mindforge.cli", "serve", "--hcp", str(hcp_file), "--upstream",
                             engine.url, "--port", str(port), "--api-key-file", str(key_file)], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                health = httpx.get(url + "/health", timeout=30)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "mindforge serve did not come up in 120 s"
                time.sleep(0.5)
        assert health.status_code == 200 and health.json()["upstream"]["ok"] is True
        assert httpx.get(url + "/v1/models").status_code == 401
        client = openai.OpenAI(api_key="sk-cli-test", base_url=url + "/v1", max_retries=0, timeout=600)
        assert [m.id for m in client.models.list()] == [MODEL]
        reply = client.chat.completions.create(model=MODEL, max_tokens=4,
                                               messages=[{"role": "user", "content": "Say hi."}])
        assert reply.choices[0].finish_reason in ("stop", "length") and "mf-L" not in reply.model_dump_json()
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_engine_lacking_the_hcps_adapters_is_named(engine, capsys) -> None:
    """/health is a 503 naming what the engine lacks; a turn that needs it says so without the names."""
    lacking = [*SMALL, {"op": "replace", "path": "/router/routes/L0/served_adapter", "value": "mf-L0-v0099"},
               {"op": "replace", "path": "/router/routes/L3/served_adapter", "value": "mf-L3-v0099"}]
    hcp = make_hcp(lacking)
    harness = open_harness(hcp, engine.url, model_path(), client=EngineClient(engine.url, backoff_s=0.01))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(harness, api_key=None)),
                             base_url="http://p")
    health = asyncio.run(http.get("/health"))
    upstream = health.json()["upstream"]
    assert health.status_code == 503 and upstream["missing_adapters"] == ["mf-L0-v0099", "mf-L3-v0099"]
    assert "does not serve 2 adapter(s)" in upstream["error"] and "L0, L3" in upstream["error"]
    # the route hop asks for L0's adapter, so every turn fails: the 502 says why, by count
    resp = asyncio.run(http.post("/v1/chat/completions",
                                 json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}))
    message = resp.json()["error"]["message"]
    assert resp.status_code == 502 and "does not serve 2 of the 4 adapters" in message, message
    assert "mf-L" not in message and "not served here" not in message
    from mindforge.cli.serve import _say_upstream_state  # what `mindforge serve` prints at start

    _say_upstream_state(harness)
    assert "mf-L0-v0099, mf-L3-v0099" in capsys.readouterr().err
    served = open_harness(make_hcp(SMALL), engine.url, model_path(), client=EngineClient(engine.url))
    ok = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(served, api_key=None)), base_url="http://p")
    health = asyncio.run(ok.get("/health"))
    assert health.status_code == 200 and health.json()["upstream"]["missing_adapters"] == []
