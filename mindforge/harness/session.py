"""Conversation state and the own view each adapter sees.

A conversation is an append-only list of segments. A segment is one task:
the user request that opened it, the adapter (route) that owns it, and its
trace, the id pieces that followed the request (hook messages, the adapter's
own assistant messages as the engine's completion ids, tool results). When
the task ends the owner writes a short summary, kept on the segment and never
returned to the client.

The view of route R is rendered, in order, from:

1. the head: one system message for R (router identity, R's system
   instructions, AGENTS.md, R's skills, the declared tools, the client's own
   system text);
2. every closed segment in the window: R's own verbatim (request + trace),
   another route's as the request plus one assistant message carrying its
   summary;
3. the open segment, if R owns it.

Why this is byte-stable: every piece is either rendered from text that never
changes once written (memoised per message by the renderer) or is engine ids
kept as they are; segments are only appended or closed, and a closed
segment's rendering depends only on whether R owns it. So when R is
re-entered after another adapter's task, its previous view is a prefix of the
new one and the engine's per-adapter prefix cache hits. The window (the last
``max_own_view_tasks`` closed segments, fewer when the context budget
demands it) is the one place a prefix can change, and only when it slides.

Tool results are sticky: while the open segment has calls waiting for
results, the next input continues that segment on its owner, with no route
hop and no summary until the task ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mindforge.harness.render import ChatRenderer
from mindforge.harness.toolcodec import ToolCall, tools_block
from mindforge.hcp import HCP

OTHER_TASK = "[An earlier request was handled by another specialist. Summary: {summary}]"
OTHER_TASK_NO_SUMMARY = "[An earlier request was handled by another specialist.]"


@dataclass
class Segment:
    owner: str
    request: str
    trace: list[tuple[int, ...]] = field(default_factory=list)
    summary: str = ""
    closed: bool = False
    pending: tuple[ToolCall, ...] = ()  # calls issued, results not yet in


@dataclass
class Session:
    """One conversation. Hold ``lock`` across a turn: turns of one session never interleave."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    system: str = ""  # the client's system / developer text
    tools: tuple[dict[str, Any], ...] = ()  # client-supplied tools (OpenAI form)
    segments: list[Segment] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    def open_segment(self) -> Segment | None:
        if self.segments and not self.segments[-1].closed:
            return self.segments[-1]
        return None

    @property
    def pending_route(self) -> str | None:
        """The route a tool result must continue on, if calls are waiting."""
        seg = self.open_segment()
        return seg.owner if seg is not None and seg.pending else None

    def begin(self, owner: str, request: str) -> Segment:
        """Open a task; an abandoned open one (a tool loop the client left) closes unsummarised."""
        seg = self.open_segment()
        if seg is not None:
            seg.closed, seg.pending = True, ()
        seg = Segment(owner=owner, request=request)
        self.segments.append(seg)
        return seg

    def closed(self) -> list[Segment]:
        return [s for s in self.segments if s.closed]


class ViewBuilder:
    """Renders own views of one HCP's harness with one renderer."""

    def __init__(self, hcp: HCP, renderer: ChatRenderer):
        self.hcp, self.renderer = hcp, renderer

    def system_text(self, route: str, session_system: str = "", tools: Sequence[dict[str, Any]] = ()) -> str:
        hcp = self.hcp
        skills = [f"## Skill: {s.name}\n{s.description}\n{s.body}" for s in hcp.skills_for(route)]
        parts = [hcp.router.identity, hcp.system_for(route), hcp.agents_md, "\n\n".join(skills),
                 tools_block([*(t.model_dump(mode="json") for t in hcp.tools), *tools]), session_system]
        return "\n\n".join(p.strip() for p in parts if p and p.strip())

    def head_ids(self, route: str, session: Session) -> tuple[int, ...]:
        return self.renderer.message_ids("system", self.system_text(route, session.system, session.tools),
                                         first=True)

    def segment_ids(self, route: str, seg: Segment) -> list[int]:
        out = list(self.renderer.message_ids("user", seg.request))
        if seg.owner == route:
            for piece in seg.trace:
                out += piece
        else:
            text = OTHER_TASK.format(summary=seg.summary) if seg.summary else OTHER_TASK_NO_SUMMARY
            out += self.renderer.message_ids("assistant", text)
        return out

    def view_ids(self, route: str, session: Session, reserve: int = 0) -> list[int]:
        """R's own view, without the generation prompt; ``reserve`` tokens are kept free for the reply."""
        head = list(self.head_ids(route, session))
        closed = session.closed()[-self.hcp.limits.max_own_view_tasks:] if self.hcp.limits.max_own_view_tasks else []
        open_seg = session.open_segment()
        tail = self.segment_ids(route, open_seg) if open_seg is not None and open_seg.owner == route else []
        pieces = [self.segment_ids(route, s) for s in closed]
        budget = self.hcp.limits.max_context_tokens - reserve - len(head) - len(tail)
        # drop the oldest tasks first: the prefix changes once, then is stable again
        while pieces and sum(map(len, pieces)) > budget:
            pieces.pop(0)
        out = head
        for p in pieces:
            out += p
        return out + tail

    def summary_view_ids(self, route: str, session: Session, seg: Segment) -> list[int]:
        """The summary hop: the owner's view of the finished task, then the summary request."""
        ids = self.view_ids(route, session, reserve=self.hcp.sampling("summary").max_tokens)
        for hook in self.hcp.hooks_for("task_end", route):
            ids += self.hook_ids(hook.action, hook.text)
        return ids + list(self.renderer.message_ids("user", self.hcp.router.summary_prompt))

    def hook_ids(self, action: str, text: str) -> tuple[int, ...]:
        return self.renderer.message_ids("system" if action == "append_system" else "user", text)
