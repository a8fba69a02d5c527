"""The proxy over a stand-in engine, driven by the official openai client (in-process ASGI)."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from harness_fakes import FakeEngine, renderer

from mindforge.cli.serve import api_key_from, check_auth
from mindforge.errors import InputError
from mindforge.harness.proxy import create_app

KEY = "sk-test-key"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def tool_answer(kind, request, prompt):
    if kind == "route":
        return "L1" if "weather" in request else "L0"
    if kind == "summary":
        return "summary"
    if "<|im_start|>tool" in prompt:
        return "It is sunny."
    if "weather" in request:
        return '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    return f"Answer to: {request[:30]}"


@pytest.fixture(scope="module")
def r():
    return renderer()


def setup(r, answer=None):
    eng = FakeEngine(r, answer)
    eng.refuse = None  # an engine 4xx message to answer with, to check what leaks through
    scripted = eng.handler

    def handler(request: httpx.Request) -> httpx.Response:
        if eng.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if eng.refuse:
            return httpx.Response(400, json={"error": {"message": eng.refuse}})
        return scripted(request)

    eng.handler = handler
    app = create_app(eng.harness(), api_key=KEY)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")
    client = openai.AsyncOpenAI(api_key=KEY, base_url="http://proxy.test/v1", http_client=http, max_retries=0)
    return eng, app, http, client


def test_chat_stream_and_history_continuation(r) -> None:
    eng, _, _, client = setup(r)

    async def go():
        first = await client.chat.completions.create(model="smollm2-135m-instruct", messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "L2 write add"}])
        msg = first.choices[0].message
        assert msg.content == "```python\nAnswer to: L2 write add```" and first.model == "smollm2-135m-instruct"
        assert "mf-L" not in first.model_dump_json()
        history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "L2 write add"},
                   {"role": "assistant", "content": msg.content}, {"role": "user", "content": "L2 now sub"}]
        stream = await client.chat.completions.create(model="smollm2-135m-instruct", messages=history, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == "```python\nAnswer to: L2 now sub```"

    asyncio.run(go())
    # the second L2 answer extends the first one's ids: the session was found by the history's hash
    answers = [q for q in eng.requests if q["model"] == "mf-L2-v0000" and q.get("stop") == ["```"]]
    a1, a2 = eng.requests[1], eng.requests[4]
    assert a1["model"] == a2["model"] == "mf-L2-v0000"
    assert a2["prompt"][: len(a1["prompt"])] == a1["prompt"] and answers


def test_client_tools_round_trip_on_the_same_adapter(r) -> None:
    eng, _, _, client = setup(r, tool_answer)

    async def go():
        msgs = [{"role": "user", "content": "weather in Oslo?"}]
        first = await client.chat.completions.create(model="smollm2-135m-instruct", messages=msgs, tools=TOOLS)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
        n = len(eng.requests)
        msgs += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'}]
        second = await client.chat.completions.create(model="smollm2-135m-instruct", messages=msgs, tools=TOOLS)
        assert second.choices[0].message.content == "It is sunny."
        return n

    n = asyncio.run(go())
    after = eng.requests[n:]
    assert [q["model"] for q in after] == ["mf-L1-v0000", "mf-L1-v0000"]  # answer + summary, no route hop
    assert not any(q["prompt"] and r.decode(q["prompt"], False).endswith("model_id=") for q in after)


def test_responses_continuation_and_function_calls(r) -> None:
    eng, _, _, client = setup(r, tool_answer)

    async def go():
        one = await client.responses.create(model="smollm2-135m-instruct", input="L0 hello", instructions="Be kind.")
        assert one.output_text == "Answer to: L0 hello"
        two = await client.responses.create(model="smollm2-135m-instruct", input="weather?",
                                            previous_response_id=one.id,
                                            tools=[{"type": "function", "name": "get_weather", "parameters": {
                                                "type": "object", "properties": {}}}])
        call = next(o for o in two.output if o.type == "function_call")
        three = await client.responses.create(model="smollm2-135m-instruct", previous_response_id=two.id, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
        assert three.output_text == "It is sunny."
        with pytest.raises(openai.NotFoundError, match="previous_response_id"):
            await client.responses.create(model="smollm2-135m-instruct", input="x", previous_response_id="resp_no")

    asyncio.run(go())
    l1 = [q for q in eng.requests if q["model"] == "mf-L1-v0000"]
    assert "Be kind." in r.decode(l1[0]["prompt"])  # instructions reach the adapter's system head


def test_bad_input_is_a_clear_error_and_the_server_keeps_serving(r) -> None:
    eng, _, http, client = setup(r)
    auth = {"Authorization": f"Bearer {KEY}"}

    async def go():
        bad = await http.post("/v1/chat/completions", content=b"{not json", headers=auth)
        assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
        miss = await http.post("/v1/chat/completions", json={"model": "smollm2-135m-instruct"}, headers=auth)
        assert miss.status_code == 400 and miss.json()["error"]["param"] == "messages"
        role = await http.post("/v1/chat/completions", headers=auth, json={
            "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}, {"role": "wizard"}]})
        assert role.status_code == 400 and role.json()["error"]["param"] == "messages[1].role"
        last = await http.post("/v1/chat/completions", headers=auth, json={
            "model": "smollm2-135m-instruct", "messages": [{"role": "assistant", "content": "x"}]})
        assert last.status_code == 400 and "last message" in last.json()["error"]["message"]
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            await client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
        noauth = await http.post("/v1/chat/completions", json={})
        assert noauth.status_code == 401 and (await http.get("/health")).status_code == 200
        models = (await http.get("/v1/models", headers=auth)).json()
        assert [m["id"] for m in models["data"]] == ["smollm2-135m-instruct"]
        eng.down = True
        with pytest.raises(openai.APIStatusError) as down:
            await client.chat.completions.create(model="smollm2-135m-instruct",
                                                 messages=[{"role": "user", "content": "x"}])
        assert down.value.status_code == 502 and "unavailable" in str(down.value)
        health = await http.get("/health")
        assert health.status_code == 503 and health.json()["upstream"]["ok"] is False
        assert "ConnectError" in health.json()["upstream"]["error"]
        eng.down = False
        assert (await http.get("/health")).json()["upstream"] == {"ok": True, "error": None, "missing_adapters": []}
        eng.refuse = "adapter 'mf-L1-v0000' is not loaded (loaded: mf-L0-v0000, mf-L2-v0000)"
        refused = await http.post("/v1/chat/completions", headers=auth, json={
            "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}]})
        assert refused.status_code == 502 and "is not loaded" in refused.json()["error"]["message"]
        assert "mf-L" not in refused.text  # adapter names never reach the client, errors included
        eng.refuse = None
        ok = await client.chat.completions.create(model="smollm2-135m-instruct",
                                                  messages=[{"role": "user", "content": "L0 still there?"}])
        assert ok.choices[0].message.content == "Answer to: L0 still there?"

    asyncio.run(go())


def test_api_key_rules(tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-file\n")
    assert api_key_from(key_file, None) == "sk-file" and api_key_from(None, "sk-env") == "sk-env"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InputError, match="empty"):
        api_key_from(tmp_path / "empty", None)
    with pytest.raises(InputError, match="API key is required"):
        check_auth("127.0.0.1", None, False)
    with pytest.raises(InputError, match="loopback"):
        check_auth("0.0.0.0", None, True)
    check_auth("127.0.0.1", None, True)
    check_auth("::1", None, True)
    check_auth("127.0.0.2", None, True)
    with pytest.raises(InputError, match="loopback"):
        check_auth("localhost.example.com", None, True)
    check_auth("0.0.0.0", "k", False)


def test_stream_usage_chunk_when_asked(r) -> None:
    _, _, http, client = setup(r)

    async def go():
        stream = await client.chat.completions.create(model="smollm2-135m-instruct", stream=True,
                                                      stream_options={"include_usage": True},
                                                      messages=[{"role": "user", "content": "L0 hi"}])
        chunks = [c async for c in stream]
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
        assert chunks[-2].choices[0].finish_reason == "stop"
        bad = await http.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, json={
            "model": "smollm2-135m-instruct", "stream": True, "stream_options": "yes",
            "messages": [{"role": "user", "content": "x"}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream_options"

    asyncio.run(go())


def test_fifty_concurrent_conversations_keep_their_own_state(r) -> None:
    """Each conversation's second answer prompt holds its own marker and no other (the engine's own view)."""
    eng, _, _, client = setup(r)
    words = [f"qz{i:02d}k" for i in range(50)]

    async def conversation(word):
        msgs = [{"role": "user", "content": f"L2 the marker is {word}"}]
        one = await client.chat.completions.create(model="smollm2-135m-instruct", messages=msgs)
        msgs += [{"role": "assistant", "content": one.choices[0].message.content},
                 {"role": "user", "content": "L2 repeat it"}]
        two = await client.chat.completions.create(model="smollm2-135m-instruct", messages=msgs)
        return two.choices[0].message.content

    async def go():
        return await asyncio.gather(*(conversation(w) for w in words))

    assert asyncio.run(go()) == ["```python\nAnswer to: L2 repeat it```"] * 50
    seconds = [r.decode(q["prompt"], False) for q in eng.requests if q["model"] == "mf-L2-v0000"]
    seconds = [t for t in seconds if t.endswith("L2 repeat it<|im_end|>\n<|im_start|>assistant\n```python\n")]  # no summaries
    assert len(seconds) == 50
    for text in seconds:
        assert sum(w in text for w in words) == 1, text  # its own first task verbatim, nobody else's
