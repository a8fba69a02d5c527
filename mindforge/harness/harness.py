"""The MoL router harness: one user turn through route, answer, tools and summary.

This is the single implementation the proxy and training rollouts share. A
turn returns every engine call it made as a ``Hop`` (adapter, the prompt ids
sent, the completion ids and logprobs returned, finish reason, timings), so
a trainer can take ``prompt_ids + completion_ids`` exactly as the engine saw
them. Adapter names appear only in hops, never in what a client receives.

Hops of a new request: route (L0, prefilled ``model_id=``), answer on the
chosen route's own view (after the route's ``prefill_answer`` text, if
the HCP gives one: the engine continues it, and a prefilled fenced block
ends at its closing fence), then, when the answer calls tools and an executor
is given, the results are appended to that route's segment and it answers
again (at most ``limits.max_tool_turns`` rounds); when there is no executor
the calls are handed back pending and a later ``turn`` with
``tool_results`` continues on the same route. When the task ends the owner
writes its summary (a hidden hop).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mindforge.errors import InputError
from mindforge.harness import router
from mindforge.harness.client import Completion, EngineClient
from mindforge.harness.render import ChatRenderer
from mindforge.harness.session import Segment, Session, ViewBuilder
from mindforge.harness.toolcodec import CALL_CLOSE, ToolCall, encode_result, function_of, parse
from mindforge.hcp import HCP, ROUTES
from mindforge.tasks.models import Hop

ToolExecutor = Callable[[str, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ToolResult:
    """A result the client sends back for a pending call (``call_id`` or ``name`` identifies it)."""

    content: str
    call_id: str = ""
    name: str = ""


@dataclass
class TurnRecord:
    answer: str
    route: str
    hops: list[Hop] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # name, arguments, result
    pending_tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # stop | length | tool_calls
    summary: str | None = None
    routed: bool = False  # a route hop ran (False for a tool-result continuation)
    malformed_calls: list[str] = field(default_factory=list)

    @property
    def usage(self) -> dict[str, int]:
        prompt = sum(len(h.prompt_ids) for h in self.hops)
        completion = sum(len(h.completion_ids) for h in self.hops)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Harness:
    def __init__(self, hcp: HCP, client: EngineClient, renderer: ChatRenderer):
        self.hcp, self.client, self.renderer = hcp, client, renderer
        self.views = ViewBuilder(hcp, renderer)

    def new_session(self, system: str = "", tools: Sequence[dict[str, Any]] = ()) -> Session:
        return Session(system=system, tools=tuple(tools))

    # ------------------------------------------------------------------ one engine call
    async def _hop(self, kind: str, route: str, prompt_ids: Sequence[int], role: str, *,
                   seed: int | None, max_tokens: int | None = None, extra_stop: Sequence[str] = ()) -> Hop:
        s = self.hcp.sampling(role)
        adapter = self.hcp.served_adapter(route)
        limit = max_tokens or s.max_tokens
        started, t0 = time.time(), time.perf_counter()
        c: Completion = (await self.client.complete(
            model=adapter, prompt_ids=prompt_ids, max_tokens=limit, temperature=s.temperature, top_p=s.top_p,
            stop=[*s.stop, *extra_stop] or None, seed=seed))[0]
        return Hop(kind=kind, route=route, adapter=adapter, prompt_ids=tuple(c.prompt_ids),
                   completion_ids=c.token_ids, logprobs=c.logprobs, finish_reason=c.finish_reason, text=c.text,
                   started_at=started, duration_s=time.perf_counter() - t0)

    # ------------------------------------------------------------------ a user turn
    async def turn(self, session: Session, user_message: str | None, *,
                   tools: Sequence[dict[str, Any]] | None = None, tool_executor: ToolExecutor | None = None,
                   tool_results: Sequence[ToolResult] | None = None, seed: int | None = None,
                   max_tokens: int | None = None, route: str | None = None, summarize: bool = True) -> TurnRecord:
        """One user turn (``user_message``) or the continuation after client tool results.

        ``route`` pins a new request to one route without a route hop (training one
        specialist, tests); ``None`` asks the router, as production does.
        ``summarize=False`` skips the summary hop for a session that ends with this
        turn (a scored attempt): the summary only feeds later turns, and every hop
        before it is the same either way.
        """
        async with session.lock:
            if tools is not None:
                for t in tools:
                    function_of(t)  # refuse a malformed tool before anything is spent
                session.tools = tuple(tools)
            seeds = _seeds(seed)
            if tool_results:
                seg = self._continue(session, tool_results)
                rec = TurnRecord(answer="", route=seg.owner)
            else:
                if not isinstance(user_message, str) or not user_message.strip():
                    raise InputError("turn", "user_message", "expected a non-empty request text")
                if route is not None and route not in ROUTES:
                    raise InputError("turn", "route", f"expected one of {ROUTES}, got {route!r}")
                rec = await self._decide(user_message, route, next(seeds))
                seg = session.begin(rec.route, user_message)
                for event in ("task_start",):
                    seg.trace += [self.views.hook_ids(h.action, h.text) for h in self.hcp.hooks_for(event, seg.owner)]
            await self._answer_loop(session, seg, rec, tool_executor, seeds, max_tokens)
            if not rec.pending_tool_calls and summarize:
                await self._summarize(session, seg, rec, next(seeds))
            return rec

    def _continue(self, session: Session, results: Sequence[ToolResult]) -> Segment:
        seg = session.open_segment()
        if seg is None or not seg.pending:
            raise InputError("turn", "tool_results", "no tool call is waiting for a result in this conversation")
        self._append_results(seg, [(self._match(seg.pending, r, i), r.content) for i, r in enumerate(results)])
        seg.pending = ()
        return seg

    @staticmethod
    def _match(pending: Sequence[ToolCall], result: ToolResult, index: int) -> ToolCall:
        for call in pending:
            if result.call_id and call.id == result.call_id:
                return call
        if result.call_id and not any(c.id == result.call_id for c in pending):
            raise InputError("turn", f"tool_results[{index}].tool_call_id",
                             f"{result.call_id!r} names no pending call; pending: {[c.id for c in pending]}")
        return pending[min(index, len(pending) - 1)]

    def _append_results(self, seg: Segment, results: Sequence[tuple[ToolCall, Any]]) -> None:
        cap = self.hcp.limits.max_tool_result_chars
        for _call, result in results:
            seg.trace.append(self.renderer.message_ids("tool", encode_result(result, cap)))
        seg.trace += [self.views.hook_ids(h.action, h.text) for h in self.hcp.hooks_for("after_tool_result", seg.owner)]

    async def _decide(self, request: str, pinned: str | None, seed: int | None) -> TurnRecord:
        if pinned is not None:
            return TurnRecord(answer="", route=pinned)
        hop = await self._route(request, seed)
        return TurnRecord(answer="", route=router.decide(self.hcp, hop.text).route, hops=[hop], routed=True)

    async def _route(self, request: str, seed: int | None) -> Hop:
        return await self._hop("route", "L0", self.route_prompt_ids(request), "route", seed=seed)

    def route_prompt_ids(self, request: str) -> list[int]:
        """The ids the route hop sends for a new request (router training renders its prompts with this)."""
        return self.renderer.prompt(router.route_messages(self.hcp, request), prefill=router.PREFILL)

    def label_ids(self, label: str) -> tuple[int, ...]:
        """The completion that makes the route hop choose ``label``: the label, then the hop's first stop."""
        stops = self.hcp.sampling("route").stop
        return self.renderer.encode(label + (stops[0] if stops else ""))

    async def route_request(self, request: str, seed: int | None = None) -> TurnRecord:
        """The router's decision for a new request alone (routing accuracy), the same hop a turn makes."""
        return await self._decide(request, None, seed)

    async def _answer_loop(self, session: Session, seg: Segment, rec: TurnRecord, executor: ToolExecutor | None,
                           seeds: Any, max_tokens: int | None) -> None:
        declared = bool(session.tools or self.hcp.tools)
        limit = max_tokens or self.hcp.sampling("answer").max_tokens
        prefill = self.hcp.answer_prefill(seg.owner)
        prefill_ids = self._prefill_ids(seg.owner)
        stops = (*answer_stops(prefill), *((CALL_CLOSE,) if declared else ()))
        for round_ in range(self.hcp.limits.max_tool_turns + 1):
            seg.trace += [self.views.hook_ids(h.action, h.text) for h in self.hcp.hooks_for("before_answer", seg.owner)]
            prompt = (self.views.view_ids(seg.owner, session, reserve=limit + len(prefill_ids))
                      + list(self.renderer.generation_ids) + list(prefill_ids))
            hop = await self._hop("answer", seg.owner, prompt, "answer", seed=next(seeds), max_tokens=limit,
                                  extra_stop=stops)
            seg.trace.append(self.renderer.assistant_ids((*prefill_ids, *hop.completion_ids)))
            text = answer_text(prefill, hop.text, hop.finish_reason)
            parsed = parse(text, id_seed=f"{session.id}|{len(session.segments)}|{len(rec.hops)}") if declared \
                else parse("", "")
            content = parsed.content if declared else text
            rec.hops.append(hop.model_copy(update={"tool_calls": tuple(c.openai() for c in parsed.calls)}))
            rec.answer, rec.finish_reason = content, hop.finish_reason
            rec.malformed_calls += parsed.malformed
            if not parsed.calls:
                return
            if executor is None or round_ == self.hcp.limits.max_tool_turns:
                if executor is None:
                    seg.pending = parsed.calls
                    rec.pending_tool_calls = list(parsed.calls)
                rec.finish_reason = "tool_calls"
                return
            results = [(c, await executor(c.name, c.arguments)) for c in parsed.calls]
            rec.calls += [{"name": c.name, "arguments": c.arguments, "result": r} for c, r in results]
            self._append_results(seg, results)

    async def _summarize(self, session: Session, seg: Segment, rec: TurnRecord, seed: int | None) -> None:
        ids = self.views.summary_view_ids(seg.owner, session, seg) + list(self.renderer.generation_ids)
        hop = await self._hop("summary", seg.owner, ids, "summary", seed=seed)
        rec.hops.append(hop)
        seg.summary = " ".join(hop.text.split())[: self.hcp.limits.max_summary_chars]
        seg.closed = True
        rec.summary = seg.summary

    # ------------------------------------------------------------------ one-off roles
    async def role(self, role: str, prompt: str, *, seed: int | None = None,
                   max_tokens: int | None = None) -> TurnRecord:
        """One hop with the HCP's sampling and the default route's adapter (Discovery, Expansion)."""
        if role not in ("propose", "reflect"):
            raise InputError("harness.role", "role", f"expected 'propose' or 'reflect', got {role!r}")
        route = self.hcp.router.default_route
        messages = [{"role": "user", "content": prompt}]
        if self.hcp.router.identity.strip():
            messages.insert(0, {"role": "system", "content": self.hcp.router.identity})
        hop = await self._hop("answer", route,
                              self.renderer.prompt(messages), role, seed=seed, max_tokens=max_tokens)
        return TurnRecord(answer=hop.text, route=route, hops=[hop], finish_reason=hop.finish_reason)

    def answer_prompt_ids(self, route: str, request: str, tools: Sequence[dict[str, Any]] = ()) -> list[int]:
        """The ids a fresh session's first answer hop on ``route`` sends (the parity probe's prompts)."""
        session = self.new_session(tools=tools)
        seg = session.begin(route, request)
        seg.trace += [self.views.hook_ids(h.action, h.text) for h in
                      (*self.hcp.hooks_for("task_start", route), *self.hcp.hooks_for("before_answer", route))]
        return self.views.view_ids(route, session) + list(self.renderer.generation_ids) + list(self._prefill_ids(route))

    def _prefill_ids(self, route: str) -> tuple[int, ...]:
        """The ids of ``route``'s answer prefill, sent after the generation prompt (none without one)."""
        prefill = self.hcp.answer_prefill(route)
        return self.renderer.encode(prefill) if prefill else ()


_OPENS_FENCE = re.compile(r"(?:\A|\n)[ \t]*```[^`\n]*\n?\Z")
FENCE = "```"


def answer_stops(prefill: str) -> tuple[str, ...]:
    """The stop strings an answer that starts with ``prefill`` adds.

    A prefill that opens a fenced block makes the block the deliverable: the
    verifier reads the first block only (``rollouts.fenced_block``), so the
    answer ends at the fence that closes it instead of spending tokens on
    examples and prose nothing reads.
    """
    return (FENCE,) if _OPENS_FENCE.search(prefill) else ()


def answer_text(prefill: str, completion: str, finish_reason: str | None) -> str:
    """The answer a client receives: the prefill, the completion, and the fence the stop string took."""
    if answer_stops(prefill) and finish_reason == "stop":
        return f"{prefill}{completion}{FENCE}"
    return prefill + completion


def _seeds(seed: int | None) -> Any:
    """Distinct, reproducible seeds for the hops of one turn."""
    i = 0
    while True:
        yield None if seed is None else (seed + 7919 * i) & 0x7FFFFFFF
        i += 1
