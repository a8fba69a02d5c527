"""The one tool-call format MindForge models read and write.

Tools are declared to the model in the system message as a ``<tools>``
block, one JSON object per line (OpenAI function schema: name, description,
parameters). The model calls a tool by writing, anywhere in its answer::

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

one block per call; text outside the blocks is the message content. A tool
result goes back to the model as a ``tool`` message whose content is the
result serialised as JSON (a string result is sent as is), cut to the HCP's
``max_tool_result_chars``. Encoding is canonical (sorted keys, no spaces after
separators), so a call the harness writes back into a view is byte-stable.

A block whose JSON is malformed or lacks a string ``name`` and an object
``arguments`` is not a call: it stays in the content, and
``ParsedAnswer.malformed`` says why, so training can see the model's mistake.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mindforge.errors import InputError

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_ESCAPED_CLOSE = "<\\/"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)

TOOLS_PREAMBLE = (
    "# Tools\n\nYou can call these functions. Their signatures, one JSON object a line:\n<tools>\n"
)
TOOLS_USAGE = (
    "\n</tools>\n\nTo call a function, write exactly\n"
    '<tool_call>{"name": "<function name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
    "one block a call, then stop and wait for the results."
)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": canonical(self.arguments)}}


@dataclass(frozen=True)
class ParsedAnswer:
    content: str
    calls: tuple[ToolCall, ...] = ()
    malformed: tuple[str, ...] = field(default=())


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The function part of an OpenAI tool (``{"type": "function", "function": {...}}``) or a bare one."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InputError("tools", "", "a tool must be {'type': 'function', 'function': {'name': ..., "
                         "'description': ..., 'parameters': {...}}}")
    return fn


def tools_block(tools: Sequence[dict[str, Any]]) -> str:
    """The declaration of ``tools`` for the system message; empty for no tools."""
    if not tools:
        return ""
    lines = []
    for tool in tools:
        fn = function_of(tool)
        lines.append(canonical({"name": fn["name"], "description": fn.get("description", ""),
                                "parameters": fn.get("parameters", {"type": "object", "properties": {}})}))
    return TOOLS_PREAMBLE + "\n".join(lines) + TOOLS_USAGE


def encode_calls(content: str, calls: Sequence[ToolCall]) -> str:
    """An assistant message's text: its content, then one block per call."""
    # "</" inside a JSON string is written as "<" + "\\/" (the same JSON value), so no argument closes a block
    blocks = [CALL_OPEN + call_json(c).replace("</", _ESCAPED_CLOSE) + CALL_CLOSE for c in calls]
    return "\n".join([p for p in (content.strip(),) if p] + blocks)


def call_json(call: ToolCall) -> str:
    """``{"name":...,"arguments":{...}}``: name first, as the format reads (models copy the order)."""
    return '{"name":' + canonical(call.name) + ',"arguments":' + canonical(call.arguments) + "}"


def encode_result(result: Any, max_chars: int | None = None) -> str:
    text = result if isinstance(result, str) else canonical(result)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars] + f"... [cut at {max_chars} characters]"
    return text


def call_id(seed: str, index: int) -> str:
    """A stable call id (never shown to the model; used to match client results)."""
    return "call_" + hashlib.sha256(f"{seed}|{index}".encode()).hexdigest()[:24]


def parse(text: str, id_seed: str = "") -> ParsedAnswer:
    calls: list[ToolCall] = []
    problems: list[str] = []
    kept: list[str] = []
    pos = 0
    for m in _CALL.finditer(text):
        found, why = _block(m.group(1))
        if not found:
            problems.append(why)
            continue
        kept.append(text[pos:m.start()])
        pos = m.end()
        for name, args in found:
            calls.append(ToolCall(name, args, call_id(id_seed, len(calls))))
    kept.append(text[pos:])
    return ParsedAnswer("".join(kept).strip(), tuple(calls), tuple(problems))


def _block(body: str) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The calls in one block: an object, or a list of objects (SmolLM2's own habit)."""
    try:
        obj = json.loads(body)
    except ValueError as exc:
        return [], f"tool call is not JSON ({exc.msg} at character {exc.pos}): {body[:120]!r}"
    out = []
    for item in obj if isinstance(obj, list) and obj else [obj]:
        call, why = _one_call(item, body)
        if call is None:
            return [], why
        out.append(call)
    return out, ""


def _one_call(obj: Any, body: str) -> tuple[tuple[str, dict[str, Any]] | None, str]:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None, f"tool call needs a string 'name': {body[:120]!r}"
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the OpenAI wire form: arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None, f"tool call arguments are not a JSON object: {body[:120]!r}"
    if not isinstance(args, dict):
        return None, f"tool call arguments must be a JSON object: {body[:120]!r}"
    return (obj["name"], args), ""
