"""Task, Verdict and Trajectory: the records every stage exchanges.

A task is split by who may see it. ``prompt``, ``family``, ``output_kind``,
``entry_point`` and ``tools`` form the solver's view (``Task.solver_view``);
``tests``, ``setup``, ``reference`` and ``tool_impl`` are the verifier's and
never reach a model prompt. The id is a hash of the content that defines the
task (both views, not provenance), so the same task proposed twice has one id.

A checker test is Python code run against the candidate by the sandbox
runner (``mindforge/data/sandboxes/python/runner.py``), which binds these names for it:

- ``function``: every top-level name the candidate defines (called through a
  process boundary, so arguments and results must be plain data);
- ``text``: ``answer`` (str);
- ``html``: ``html`` (str) and ``dom`` (a parsed tree, see the runner);
- ``tool_calls``: ``calls`` (list of ``{"name", "arguments", "result"}``),
  ``state`` (the tools' final state), ``answer`` (final text).

The test passes when it runs to its end without raising.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

Route = Literal["L0", "L1", "L2", "L3"]
ROUTES: tuple[str, ...] = ("L0", "L1", "L2", "L3")
OutputKind = Literal["function", "text", "html", "tool_calls"]
Nondeterminism = Literal["random", "clock", "network", "files"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _ContentAddressed(_Frozen):
    """A model whose ``id`` is derived from its content.

    Dumps carry the id for readers; on load a given id must match the content,
    so an edited record cannot keep a stale id.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _check_id(cls, data: Any, handler: Any) -> Any:
        given = None
        if isinstance(data, dict) and "id" in data:
            data = dict(data)
            given = data.pop("id")
        obj = handler(data)
        if given is not None and given != obj.id:
            raise ValueError(f"id {given!r} does not match the content (expected {obj.id!r})")
        return obj


class ToolSpec(_Frozen):
    """An OpenAI function-tool declaration the solver sees."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class CheckerTest(_Frozen):
    """One test: Python code that raises on failure. Run on its own."""

    name: str = Field(min_length=1, max_length=128)
    code: str = Field(min_length=1)


class Provenance(_Frozen):
    source: str = "seed"  # seed | mbpp | proposer name
    parents: tuple[str, ...] = ()
    cycle: int | None = None
    proposer: str | None = None
    hcp_version: str | None = None
    difficulty: int | None = Field(default=None, ge=1, le=3)
    extra: dict[str, Any] = Field(default_factory=dict)


class Task(_ContentAddressed):
    family: Route
    prompt: str = Field(min_length=1)
    output_kind: OutputKind
    entry_point: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    # verifier-only
    tests: tuple[CheckerTest, ...] = Field(min_length=1)
    setup: str = ""
    reference: str = Field(min_length=1)
    tool_impl: str = ""
    declares: tuple[Nondeterminism, ...] = ()
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, v: str | None) -> str | None:
        if v is not None and not v.isidentifier():
            raise ValueError(f"entry_point must be a Python identifier, got {v!r}")
        return v

    def model_post_init(self, context: Any, /) -> None:
        if self.output_kind == "function" and not self.entry_point:
            raise ValueError("a 'function' task needs an entry_point")
        if self.output_kind == "tool_calls" and not (self.tools and self.tool_impl):
            raise ValueError("a 'tool_calls' task needs tools and tool_impl")

    def content(self) -> dict[str, Any]:
        """What defines the task (provenance excluded): the input of its id."""
        return self.model_dump(mode="json", exclude={"provenance", "id"})

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        blob = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return "t-" + hashlib.sha256(blob.encode()).hexdigest()[:16]

    def solver_view(self) -> dict[str, Any]:
        """Everything a solver may see; nothing that grades."""
        return {
            "id": self.id,
            "family": self.family,
            "prompt": self.prompt,
            "output_kind": self.output_kind,
            "entry_point": self.entry_point,
            "tools": [t.openai() for t in self.tools],
        }


class TestOutcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"


class TestResult(_Frozen):
    name: str
    outcome: TestOutcome
    message: str = ""
    duration_s: float = 0.0


class VerdictStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INFRA_ERROR = "infra_error"


class Verdict(_Frozen):
    """Decided by host code from the runner's authenticated records only."""

    task_id: str
    status: VerdictStatus
    tests: tuple[TestResult, ...] = ()
    duration_s: float = 0.0
    flaky: bool = False
    log: str = ""

    @property
    def pass_fraction(self) -> float:
        if not self.tests:
            return 0.0
        return sum(t.outcome == TestOutcome.PASS for t in self.tests) / len(self.tests)


HopKind = Literal["route", "answer", "summary", "propose", "reflect"]


class Hop(_Frozen):
    """One engine call made by the harness, exactly as the engine saw it."""

    kind: HopKind
    route: Route
    adapter: str  # served adapter name (internal, never shown to clients)
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str | None = None
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    started_at: float = 0.0
    duration_s: float = 0.0


class Trajectory(_ContentAddressed):
    task_id: str
    hcp_version: str
    route: Route
    sample: int = 0
    seed: int | None = None
    hops: tuple[Hop, ...] = ()
    transcript: tuple[dict[str, Any], ...] = ()  # tool calls with results, in order
    answer: str = ""
    verdict: Verdict | None = None
    reward: float | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        blob = f"{self.task_id}|{self.hcp_version}|{self.sample}|{self.seed}"
        return "tr-" + hashlib.sha256(blob.encode()).hexdigest()[:16]
