"""Harness turns against a stand-in engine: routes, own views, tools, hops as the engine saw them."""

from __future__ import annotations

import asyncio

import pytest
from harness_fakes import DEFAULT_HCP, FakeEngine, make_hcp, renderer

from mindforge.errors import InputError
from mindforge.harness import EngineUnavailable, ToolResult, task_runner
from mindforge.hcp import load_hcp
from mindforge.tasks.models import Task

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def r():
    return renderer()


def run(coro):
    return asyncio.run(coro)


def test_one_turn_routes_answers_and_summarises_with_hops_as_the_engine_saw_them(r) -> None:
    eng = FakeEngine(r)
    h = eng.harness()
    s = h.new_session()
    rec = run(h.turn(s, "Please L2: write add(a, b)", seed=5))
    assert rec.route == "L2" and rec.routed
    assert [hop.kind for hop in rec.hops] == ["route", "answer", "summary"]
    assert [hop.adapter for hop in rec.hops] == ["mf-L0-v0000", "mf-L2-v0000", "mf-L2-v0000"]
    # the default HCP prefills L2's answer with a python fence: the engine continues it, the fence closes it
    assert rec.answer == "```python\nAnswer to: Please L2: write add(a, b)```"
    assert rec.summary.startswith("Summary of: Please L2")
    assert r.decode(rec.hops[1].prompt_ids, False).endswith("<|im_start|>assistant\n```python\n")
    assert eng.requests[1]["stop"] == ["```"] and rec.hops[1].text == "Answer to: Please L2: write add(a, b)"
    for hop, sent in zip(rec.hops, eng.requests, strict=True):
        assert list(hop.prompt_ids) == sent["prompt"] and sent["return_token_ids"] is True
        assert hop.completion_ids[-1] == r.eos_id and len(hop.logprobs) == len(hop.completion_ids)
    assert r.decode(rec.hops[0].prompt_ids, False).endswith("<|im_start|>assistant\nmodel_id=")
    assert "L0 = chat and instruction following" in r.decode(rec.hops[0].prompt_ids)
    assert eng.requests[1]["seed"] != eng.requests[2]["seed"]


def test_unparsable_route_falls_back_to_the_default_route(r) -> None:
    h = FakeEngine(r).harness()
    rec = run(h.turn(h.new_session(), "no label here"))
    assert rec.route == "L0" and rec.hops[0].text == "banana"


def test_a_route_prompt_with_the_request_placeholder_puts_the_request_last_behind_a_shared_prefix(r) -> None:
    prompt = "Specialists:\n{{LORA_DESCRIPTIONS}}\nReply with one of {{ROUTE_LABELS}}.\n\nRequest:\n{{REQUEST}}"
    h = FakeEngine(r).harness(make_hcp([{"op": "replace", "path": "/router/route_prompt", "value": prompt}]))
    one, two = h.route_prompt_ids("Please L2: write add(a, b)"), h.route_prompt_ids("{{ROUTE_LABELS}} as text")
    shared = next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)
    head = r.decode(one[:shared], False)
    assert "L2 = coding" in head and head.endswith("Request:\n") and "add(a, b)" not in head
    assert r.decode(two, False).endswith("Request:\n{{ROUTE_LABELS}} as text<|im_end|>\n<|im_start|>assistant\nmodel_id=")
    # without the placeholder the request comes first, as in MoL (the vLLM example HCP keeps that order)
    mol = FakeEngine(r).harness(load_hcp(DEFAULT_HCP.parent / "vllm-qwen3-8b.hcp.json"))
    assert r.decode(mol.route_prompt_ids("write add(a, b)"), False).split("<|im_start|>user\n")[1].startswith(
        "write add(a, b)\n\nRead the request above.")


def test_reentered_adapter_sees_a_byte_identical_prefix_and_others_see_summaries(r) -> None:
    eng = FakeEngine(r)
    h = eng.harness()
    s = h.new_session()
    first = run(h.turn(s, "L2 task one"))
    run(h.turn(s, "L3 task two"))
    third = run(h.turn(s, "L2 task three"))
    a1, a3 = first.hops[1], third.hops[1]
    seen = list(a1.prompt_ids) + list(a1.completion_ids)
    assert list(a3.prompt_ids[: len(seen)]) == seen  # own past task verbatim: engine ids as they were
    text3 = r.decode(a3.prompt_ids, False)
    assert "Summary of: L3 task two" in text3 and "Answer to: L3 task two" not in text3
    l3_view = r.decode(eng.requests[4]["prompt"], False)  # L3's answer hop saw L2's task as its summary
    assert "Summary of: L2 task one" in l3_view and "Answer to: L2 task one" not in l3_view


def test_tools_executed_in_the_turn_continue_on_the_same_adapter_and_ids_chain(r) -> None:
    def answer(kind, request, prompt):
        if kind == "route":
            return "L1"
        if kind == "summary":
            return "Looked up the weather."
        if prompt.rstrip().endswith("<|im_start|>assistant") and "<|im_start|>tool" not in prompt:
            return 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        return "It is sunny in Paris."

    eng = FakeEngine(r, answer)
    h = eng.harness()
    calls = []

    async def execute(name, args):
        calls.append((name, args))
        return {"sky": "sunny"}

    rec = run(h.turn(h.new_session(), "weather in Paris?", tools=TOOLS, tool_executor=execute))
    assert calls == [("get_weather", {"city": "Paris"})]
    assert [hop.kind for hop in rec.hops] == ["route", "answer", "answer", "summary"]
    assert {hop.adapter for hop in rec.hops[1:]} == {"mf-L1-v0000"}
    assert rec.calls == [{"name": "get_weather", "arguments": {"city": "Paris"}, "result": {"sky": "sunny"}}]
    assert rec.hops[1].tool_calls[0]["function"]["name"] == "get_weather"
    first, second = rec.hops[1], rec.hops[2]
    chained = list(first.prompt_ids) + list(first.completion_ids)
    assert list(second.prompt_ids[: len(chained)]) == chained  # the engine's ids, untouched, after a tool call
    assert '{"sky":"sunny"}' in r.decode(second.prompt_ids[len(chained):])
    assert rec.answer == "It is sunny in Paris." and rec.finish_reason == "stop"


def test_client_tools_pend_then_results_continue_without_a_new_route(r) -> None:
    def answer(kind, request, prompt):
        if kind == "route":
            return "L1"
        if kind == "summary":
            return "Done."
        if "<|im_start|>tool" in prompt:
            return "Sunny."
        return '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'

    eng = FakeEngine(r, answer)
    h = eng.harness()
    s = h.new_session()
    rec = run(h.turn(s, "weather in Oslo?", tools=TOOLS))
    assert rec.finish_reason == "tool_calls" and rec.summary is None and s.pending_route == "L1"
    call = rec.pending_tool_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})
    more = run(h.turn(s, None, tool_results=[ToolResult('{"sky": "sunny"}', call.id)]))
    assert not more.routed and [hop.kind for hop in more.hops] == ["answer", "summary"]
    assert more.hops[0].adapter == "mf-L1-v0000" and more.answer == "Sunny." and s.pending_route is None
    before = list(rec.hops[1].prompt_ids) + list(rec.hops[1].completion_ids)
    assert list(more.hops[0].prompt_ids[: len(before)]) == before
    with pytest.raises(InputError, match="no tool call is waiting"):
        run(h.turn(s, None, tool_results=[ToolResult("x", call.id)]))


def test_a_wrong_call_id_is_refused_naming_the_field(r) -> None:
    def answer(kind, request, prompt):
        return "L1" if kind == "route" else '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'

    h = FakeEngine(r, answer).harness()
    s = h.new_session()
    run(h.turn(s, "x", tools=TOOLS))
    with pytest.raises(InputError, match=r"tool_results\[0\].tool_call_id"):
        run(h.turn(s, None, tool_results=[ToolResult("x", "call_nope")]))


def test_engine_down_raises_engine_unavailable(r) -> None:
    eng = FakeEngine(r)
    eng.down = True
    h = eng.harness()
    with pytest.raises(EngineUnavailable, match="unavailable after 2 attempts"):
        run(h.turn(h.new_session(), "hello"))


def test_role_is_one_hop_with_the_role_sampling(r) -> None:
    hcp = make_hcp([{"op": "replace", "path": "/provider/sampling/reflect/max_tokens", "value": 33}])
    eng = FakeEngine(r)
    rec = run(eng.harness(hcp).role("reflect", "Improve this."))
    assert len(rec.hops) == 1 and eng.requests[0]["max_tokens"] == 33 and rec.route == "L0"
    assert eng.requests[0]["temperature"] == hcp.sampling("reflect").temperature
    with pytest.raises(InputError):
        run(eng.harness(hcp).role("route", "x"))


def test_own_view_window_and_context_budget_drop_oldest_tasks(r) -> None:
    hcp = make_hcp([{"op": "replace", "path": "/limits/max_own_view_tasks", "value": 2}])
    eng = FakeEngine(r)
    h = eng.harness(hcp)
    s = h.new_session()
    for i in range(4):
        run(h.turn(s, f"L2 task {i}"))
    last = r.decode(eng.requests[-2]["prompt"])
    assert "task 0" not in last and "task 1" in last and "task 2" in last and "task 3" in last


def test_task_runner_runs_a_task_in_a_fresh_session(r) -> None:
    task = Task(family="L2", prompt="L2: write add", output_kind="function", entry_point="add",
                tests=[{"name": "t", "code": "assert add(1, 2) == 3"}], reference="def add(a, b): return a + b")
    eng = FakeEngine(r)
    outcome = run(task_runner(eng.harness(), max_tokens=7)(task, 11, None))
    assert outcome.route == "L2" and len(outcome.hops) == 3 and eng.requests[1]["max_tokens"] == 7


def test_a_scored_attempt_can_leave_out_the_summary_hop_and_nothing_before_it_changes(r) -> None:
    task = Task(family="L2", prompt="L2: write add", output_kind="function", entry_point="add",
                tests=[{"name": "t", "code": "assert add(1, 2) == 3"}], reference="def add(a, b): return a + b")
    full, bare = FakeEngine(r), FakeEngine(r)
    with_summary = run(task_runner(full.harness(), max_tokens=7)(task, 11, None))
    without = run(task_runner(bare.harness(), max_tokens=7, summarize=False)(task, 11, None))
    assert [h.kind for h in without.hops] == ["route", "answer"] and len(bare.requests) == 2
    assert without.answer == with_summary.answer and bare.requests == full.requests[:2]


def test_a_prefill_opening_a_fence_stops_at_its_close_and_other_prefills_add_no_stop() -> None:
    from mindforge.harness.harness import answer_stops, answer_text
    from mindforge.rollouts import fenced_block

    assert answer_stops("```python\n") == ("```",) and answer_stops("Here:\n```py") == ("```",)
    assert answer_stops("Sure, ") == () and answer_stops("") == ()
    closed = answer_text("```python\n", "x = 1\n", "stop")
    assert closed == "```python\nx = 1\n```" and fenced_block(closed, ("python",)) == "x = 1\n"
    # cut at max_tokens: the block stays open, and the verifier still reads it
    assert answer_text("```python\n", "x = 1\n", "length") == "```python\nx = 1\n"
    assert fenced_block(answer_text("```python\n", "x = 1\n", "length"), ("python",)) == "x = 1\n"
    assert answer_text("Sure, ", "ok", "stop") == "Sure, ok"
