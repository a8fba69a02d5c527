"""Renderer parity with the model's chat template, and tool-call codec round trips."""

from __future__ import annotations

import random

import pytest
from harness_fakes import renderer

from mindforge.harness import toolcodec
from mindforge.harness.render import ChatRenderer
from mindforge.harness.router import parse_label

PIECES = ["hello", "  spaced  out ", "line one\nline two\n\n", "ünïcödé ✓ 漢字", "```python\ndef f(x):\n    return x\n```",
          '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', "\t tabs\t", "", "a" * 300, "<html><b>x</b>",
          "emoji 🚀🔥", "trailing newline\n", "\n leading newline", "{\"json\": [1, 2, 3]}"]


def conversations(n: int, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs = [{"role": "system", "content": rng.choice(PIECES) + rng.choice(PIECES)}] if rng.random() < 0.6 else []
        for _ in range(rng.randint(1, 6)):
            msgs.append({"role": "user", "content": rng.choice(PIECES) + rng.choice(PIECES)})
            msgs.append({"role": rng.choice(["assistant", "assistant", "tool"]), "content": rng.choice(PIECES)})
        out.append(msgs)
    return out


@pytest.fixture(scope="module")
def r() -> ChatRenderer:
    return renderer()


def test_renderer_matches_apply_chat_template_token_for_token(r: ChatRenderer) -> None:
    tok = r.tokenizer
    for msgs in conversations(200):
        ours = r.render(msgs)
        theirs = list(tok.apply_chat_template(msgs, tokenize=True)["input_ids"])
        assert ours == theirs, f"\nours:   {r.decode(ours, False)!r}\ntheirs: {r.decode(theirs, False)!r}"
        with_gen = r.prompt(msgs)
        theirs_gen = list(tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)["input_ids"])
        assert with_gen == theirs_gen, f"\nours:   {r.decode(with_gen, False)!r}\ntheirs: {r.decode(theirs_gen, False)!r}"


def test_prefixes_render_to_prefixes(r: ChatRenderer) -> None:
    for msgs in conversations(50, seed=1):
        full = r.render(msgs)
        for k in range(1, len(msgs)):
            assert full[: len(r.render(msgs[:k]))] == r.render(msgs[:k])


def test_engine_assistant_ids_equal_the_template_for_the_same_text(r: ChatRenderer) -> None:
    # an engine answer ending with the end token, placed into a view, is what the template renders
    msgs = [{"role": "user", "content": "hi"}]
    answer = "Hello there!\nHow can I help?"
    completion = list(r.encode(answer)) + [r.eos_id]
    view = r.render(msgs) + list(r.assistant_ids(completion))
    assert view == r.render([*msgs, {"role": "assistant", "content": answer}])
    # cut by length (no end token): the end of message is added in full
    cut = list(r.encode("Hello"))
    assert list(r.assistant_ids(cut))[-2:] == [r.eos_id, *r.encode("\n")]


def test_tool_call_codec_round_trip() -> None:
    rng = random.Random(3)
    for i in range(200):
        calls = [toolcodec.ToolCall(rng.choice(["get_weather", "add", "search_docs"]),
                                    {"x": rng.randint(-5, 5), "s": rng.choice(PIECES), "nested": {"k": [1, "二"]}})
                 for _ in range(rng.randint(1, 3))]
        content = rng.choice(["", "Let me check.", "I will call tools now:"])
        parsed = toolcodec.parse(toolcodec.encode_calls(content, calls), id_seed=str(i))
        assert parsed.content == content.strip()
        assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]
        assert len({c.id for c in parsed.calls}) == len(calls)
        assert toolcodec.encode_calls(parsed.content, parsed.calls) == toolcodec.encode_calls(content, calls)


def test_tool_call_codec_accepts_lists_and_an_unclosed_last_block_and_reports_malformed() -> None:
    p = toolcodec.parse('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": "{\\"q\\": 1}"}]')
    assert [(c.name, c.arguments) for c in p.calls] == [("a", {}), ("b", {"q": 1})]
    bad = toolcodec.parse('ok <tool_call>{"name": 3}</tool_call> <tool_call>{oops</tool_call>')
    assert bad.calls == () and len(bad.malformed) == 2
    assert "name" in bad.malformed[0] and "not JSON" in bad.malformed[1]


def test_tools_block_declares_every_tool_in_canonical_json() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                               "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}}]
    block = toolcodec.tools_block(tools)
    assert '{"description":"d","name":"f","parameters":{"properties":{"a":{},"b":{}},"type":"object"}}' in block
    assert "<tool_call>" in block and toolcodec.tools_block([]) == ""


@pytest.mark.parametrize(("text", "label"), [
    ("L2", "L2"), (" l1 ", "L1"), ("L3.", "L3"), ("L0\n", "L0"), ("L4", None), ("L2 because", None),
    ("banana", None), ("", None), ("L12", None),
])
def test_router_accepts_only_canonical_labels(text: str, label: str | None) -> None:
    assert parse_label(text) == label


def test_threads_that_first_ask_for_a_renderer_at_once_all_get_the_same_one() -> None:
    """Discovery judges tasks on worker threads; the first, concurrent import of transformers once failed
    in one of them. A fresh interpreter, so that nothing is imported yet."""
    import subprocess
    import sys

    from harness_fakes import model_path

    code = (
        "import sys, threading\n"
        "from mindforge.harness import renderer_for\n"
        "got, errors = [], []\n"
        "def one():\n"
        "    try:\n"
        "        got.append(renderer_for(sys.argv[1]))\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=one) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "assert not errors, errors\n"
        "assert len(got) == 8 and len({id(r) for r in got}) == 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(model_path())], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
