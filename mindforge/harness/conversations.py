"""Where the stateless chat endpoint finds a conversation's state.

Chat clients resend the whole history each request. The proxy keys the
session it kept after each answer by a hash of the history the client will
send next (everything up to and including that answer), so the next request
finds its session by hashing its own history. The hash covers roles, text,
tool calls (name and parsed arguments) and tool call ids; whitespace inside
JSON arguments and key order do not matter.

A history the proxy has not seen (another replica answered, the proxy
restarted, the client edited it) is rebuilt deterministically: every user
message opens a task on the default route, assistant text becomes that
task's trace and, cut short, its summary. Rebuilt assistant messages are
tokenized from text (the engine's ids are gone), which is the only place
the harness tokenizes model output, and it never reaches training.

Sessions are cloned on the way out, so two requests forking one history
(a retry, a regenerate) never write into each other's state.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mindforge.harness.harness import Harness, ToolResult
from mindforge.harness.session import Segment, Session
from mindforge.harness.toolcodec import ToolCall, encode_calls, encode_result
from mindforge.harness.wire import Message, WireError


def normal(m: Message) -> list[Any]:
    calls = []
    for c in m.tool_calls or []:
        fn = c.get("function", {}) if isinstance(c, dict) else {}
        args = fn.get("arguments", "{}")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        calls.append([c.get("id", ""), fn.get("name", ""), args])
    return [m.role, m.text(), calls, m.tool_call_id or ""]


def history_key(messages: Sequence[Message]) -> str:
    blob = json.dumps([normal(m) for m in messages], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def split_request(messages: Sequence[Message]) -> tuple[list[Message], str | None, list[ToolResult]]:
    """(history before the new input, new user text or None, trailing tool results)."""
    last = messages[-1]
    if last.role == "user":
        return list(messages[:-1]), last.text(), []
    if last.role == "tool":
        k = len(messages)
        while k > 0 and messages[k - 1].role == "tool":
            k -= 1
        if k == 0 or messages[k - 1].role != "assistant" or not messages[k - 1].tool_calls:
            raise WireError(400, f"messages[{k}]: a tool message must follow an assistant message with tool_calls",
                            f"messages[{k}]")
        return list(messages[:k]), None, [ToolResult(m.text(), m.tool_call_id or "") for m in messages[k:]]
    raise WireError(400, f"messages[{len(messages) - 1}].role: the last message must be 'user' or 'tool', "
                         f"got {last.role!r}", f"messages[{len(messages) - 1}].role")


def system_text(messages: Sequence[Message]) -> str:
    return "\n\n".join(m.text() for m in messages if m.role in ("system", "developer"))


def clone(session: Session) -> Session:
    return Session(id=session.id, system=session.system, tools=session.tools,
                   segments=[replace(s, trace=list(s.trace)) for s in session.segments])


class ConversationStore:
    """An LRU map from history hash to session (in memory, one proxy process)."""

    def __init__(self, max_entries: int = 20000):
        self.max_entries = max_entries
        self._items: OrderedDict[str, Session] = OrderedDict()

    def get(self, key: str) -> Session | None:
        s = self._items.get(key)
        if s is None:
            return None
        self._items.move_to_end(key)
        return clone(s)

    def put(self, key: str, session: Session) -> None:
        self._items[key] = clone(session)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def rebuild(harness: Harness, history: Sequence[Message]) -> Session:
    session = harness.new_session(system=system_text(history))
    r, cap = harness.renderer, harness.hcp
    route = cap.router.default_route
    seg: Segment | None = None
    for i, m in enumerate(history):
        if m.role in ("system", "developer"):
            continue
        if m.role == "user":
            if seg is not None:
                seg.closed, seg.pending = True, ()
            seg = Segment(owner=route, request=m.text())
            session.segments.append(seg)
            continue
        if seg is None:
            raise WireError(400, f"messages[{i}]: a conversation starts with a user message", f"messages[{i}]")
        if m.role == "assistant":
            calls = tuple(ToolCall(c[1], c[2] if isinstance(c[2], dict) else {}, c[0]) for c in normal(m)[2])
            seg.trace.append(r.message_ids("assistant", encode_calls(m.text(), calls)))
            seg.summary = " ".join(m.text().split())[: cap.limits.max_summary_chars]
            seg.pending = calls
        else:
            seg.trace.append(r.message_ids("tool", encode_result(m.text(), cap.limits.max_tool_result_chars)))
            seg.pending = ()
    if seg is not None and not seg.pending:
        seg.closed = True
    return session
