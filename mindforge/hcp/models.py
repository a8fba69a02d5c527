"""Pydantic models of an HCP (Harness Context Protocol) document.

``mindforge/data/hcp/schemas/hcp.schema.json`` is the source of truth; these models mirror it
field for field (``tests/test_hcp.py`` validates every example and every test
document with both and checks they agree). Invariants:

- Every field is required and unknown fields are refused (``extra="forbid"``
  here, ``additionalProperties: false`` there), so ``model_dump(mode="json")``
  of a loaded document equals the document: nothing is filled in silently and
  the version hash of a model equals the hash of the file it came from.
- Models are frozen: a harness, a trainer and an evaluator holding the same
  ``HCP`` see the same values. Edits go through JSON Patch on the document
  (``mindforge.hcp.patch``), never through attribute assignment.
- Rules that JSON Schema cannot state (unique adapter names, tunable pointers
  that name a numeric field outside ``/guarded``) are checked by
  ``semantic_problems``, which both ``HCP`` and ``validate_document`` call, so
  an ``HCP`` instance is always a fully valid document.

This module imports only the leaf modules ``canonical`` and ``semantics``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mindforge.hcp.canonical import EDITOR_KEYS, canonical_json, without_editor_keys
from mindforge.hcp.semantics import semantic_problems

FORMAT = "mindforge.hcp/1"
Route = Literal["L0", "L1", "L2", "L3"]
ROUTES: tuple[str, ...] = ("L0", "L1", "L2", "L3")
Role = Literal["route", "answer", "summary", "propose", "reflect"]
ROLES: tuple[str, ...] = ("route", "answer", "summary", "propose", "reflect")
HookEvent = Literal["task_start", "before_answer", "after_tool_result", "task_end"]
HookAction = Literal["append_system", "append_user", "prefill_answer"]
# The hook action that starts the answer instead of adding a message (``HCP.answer_prefill``).
PREFILL_ACTION = "prefill_answer"
RewardKind = Literal["binary", "fraction"]
PLACEHOLDERS: tuple[str, ...] = ("{{LORA_DESCRIPTIONS}}", "{{ROUTE_LABELS}}")
# Optional, at most once: where the request goes inside the route prompt (absent: before it, as MoL does).
REQUEST_PLACEHOLDER = "{{REQUEST}}"

ADAPTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
TOOL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
ENV_PATTERN = r"^[A-Z_][A-Z0-9_]*$"
POINTER_PATTERN = r"^(/[^/]+)+$"


class _Frozen(BaseModel):
    # Strict: "1" is not a number and 1 is not a bool, as in JSON Schema. Array
    # fields relax only the container (a list becomes a tuple), not the items.
    # ``HCP.from_document`` also accepts 4.0 for an integer, as JSON Schema does.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class RouteSpec(_Frozen):
    """One LoRA specialist as the router and the engine know it."""

    adapter: str = Field(pattern=ADAPTER_PATTERN)
    served_adapter: str = Field(pattern=ADAPTER_PATTERN)
    description: str = Field(min_length=1)


class Router(_Frozen):
    identity: str
    route_prompt: str = Field(min_length=1)
    summary_prompt: str = Field(min_length=1)
    default_route: Route
    routes: dict[Route, RouteSpec]

    @field_validator("route_prompt")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        missing = [p for p in PLACEHOLDERS if p not in v]
        if missing:
            raise ValueError(f"route prompt must contain {' and '.join(missing)}")
        if v.count(REQUEST_PLACEHOLDER) > 1:
            raise ValueError(f"route prompt may contain {REQUEST_PLACEHOLDER} once, not {v.count(REQUEST_PLACEHOLDER)} times")
        return v

    @field_validator("routes")
    @classmethod
    def _all_routes(cls, v: dict[str, RouteSpec]) -> dict[str, RouteSpec]:
        missing = [r for r in ROUTES if r not in v]
        if missing:
            raise ValueError(f"routes must define exactly L0-L3; missing {', '.join(missing)}")
        return {r: v[r] for r in ROUTES}


def _unique_routes(v: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(v)) != len(v):
        raise ValueError("routes must be unique")
    return v


class Skill(_Frozen):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1)
    body: str = Field(min_length=1)
    enabled: bool
    routes: tuple[Route, ...] = Field(max_length=4, strict=False)

    _routes = field_validator("routes")(_unique_routes)


class Hook(_Frozen):
    event: HookEvent
    action: HookAction
    text: str = Field(min_length=1)
    routes: tuple[Route, ...] = Field(max_length=4, strict=False)

    _routes = field_validator("routes")(_unique_routes)


class FunctionDef(_Frozen):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str
    parameters: dict[str, Any]

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("parameters must be a JSON Schema with type 'object'")
        return v


class Tool(_Frozen):
    """An OpenAI function tool, exactly as the chat completions API takes it."""

    type: Literal["function"]
    function: FunctionDef


class Sampling(_Frozen):
    temperature: float = Field(ge=0.0, le=2.0)
    top_p: float = Field(gt=0.0, le=1.0)
    max_tokens: int = Field(ge=1, le=32768)
    stop: tuple[str, ...] = Field(max_length=8, strict=False)

    @field_validator("stop")
    @classmethod
    def _nonempty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("stop strings must not be empty")
        return v


class SamplingByRole(_Frozen):
    route: Sampling
    answer: Sampling
    summary: Sampling
    propose: Sampling
    reflect: Sampling


class Provider(_Frozen):
    base_url: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$")
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(pattern=ENV_PATTERN)
    sampling: SamplingByRole


class RolePrompts(_Frozen):
    propose: str = Field(min_length=1)
    reflect: str = Field(min_length=1)


class Limits(_Frozen):
    max_tool_turns: int = Field(ge=0, le=64)
    max_context_tokens: int = Field(ge=256, le=1048576)
    max_summary_chars: int = Field(ge=16, le=4096)
    max_tool_result_chars: int = Field(ge=64, le=1048576)
    max_own_view_tasks: int = Field(ge=0, le=1024)


class Verifier(_Frozen):
    reward: RewardKind
    test_timeout_s: float = Field(gt=0.0, le=600.0)
    reruns: int = Field(ge=0, le=10)


class SandboxLimits(_Frozen):
    memory_mb: int = Field(ge=32, le=65536)
    cpus: float = Field(gt=0.0, le=64.0)
    pids: int = Field(ge=8, le=4096)
    wall_timeout_s: float = Field(gt=0.0, le=3600.0)
    output_cap_bytes: int = Field(ge=1024, le=67108864)
    tmpfs_mb: int = Field(ge=1, le=4096)


class Guarded(_Frozen):
    verifier: Verifier
    sandbox: SandboxLimits


class TunableRange(_Frozen):
    path: str = Field(pattern=POINTER_PATTERN)
    min: float
    max: float
    integer: bool


class HCP(_Frozen):
    """A whole HCP document. See the module docstring for the invariants."""

    format: Literal["mindforge.hcp/1"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    router: Router
    agents_md: str
    skills: tuple[Skill, ...] = Field(strict=False)
    hooks: tuple[Hook, ...] = Field(strict=False)
    system: dict[Route, str]
    tools: tuple[Tool, ...] = Field(strict=False)
    provider: Provider
    prompts: RolePrompts
    limits: Limits
    tunable: tuple[TunableRange, ...] = Field(strict=False)
    guarded: Guarded

    @field_validator("system")
    @classmethod
    def _system_routes(cls, v: dict[str, str]) -> dict[str, str]:
        missing = [r for r in ROUTES if r not in v]
        if missing:
            raise ValueError(
                f"system must have an entry for every route; missing {', '.join(missing)}"
            )
        return {r: v[r] for r in ROUTES}

    @model_validator(mode="before")
    @classmethod
    def _editor_keys(cls, data: Any) -> Any:
        # `$schema` tells editors where the schema is; it is no part of the model (nor of
        # the version hash), but a document carrying a malformed one is refused, as the schema does.
        if isinstance(data, dict) and any(k in data for k in EDITOR_KEYS):
            value = data["$schema"]
            if not isinstance(value, str) or not value:
                raise ValueError("$schema must be a non-empty string")
            data = without_editor_keys(data)
        return data

    @model_validator(mode="after")
    def _semantics(self) -> HCP:
        problems = semantic_problems(self.model_dump(mode="json"))
        if problems:
            raise ValueError("; ".join(f"{p}: {m}" for p, m in problems))
        return self

    @classmethod
    def from_document(cls, doc: Any) -> HCP:
        """Validate a parsed JSON document (raises pydantic.ValidationError).

        Goes through canonical JSON so that strict mode sees JSON types
        (arrays, integral numbers) exactly as JSON Schema does.
        """
        return cls.model_validate_json(canonical_json(doc, editor_keys=True))

    # Convenience views for the harness, trainer and stages.
    def served_adapter(self, route: str) -> str:
        """The engine-side adapter name (with version) that serves ``route``."""
        return self.router.routes[route].served_adapter  # type: ignore[index]

    def adapter(self, route: str) -> str:
        """The stable adapter name of ``route`` (no version)."""
        return self.router.routes[route].adapter  # type: ignore[index]

    def sampling(self, role: str) -> Sampling:
        """Sampling parameters for one role: route, answer, summary, propose, reflect."""
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r}; expected one of {ROLES}")
        return getattr(self.provider.sampling, role)

    def system_for(self, route: str) -> str:
        return self.system[route]  # type: ignore[index]

    def skills_for(self, route: str) -> tuple[Skill, ...]:
        """Enabled skills that apply to ``route`` (an empty ``routes`` means all)."""
        return tuple(s for s in self.skills if s.enabled and (not s.routes or route in s.routes))

    def hooks_for(self, event: str, route: str) -> tuple[Hook, ...]:
        """The message hooks (``append_*``) that fire at ``event`` on ``route``."""
        return tuple(
            h for h in self.hooks
            if h.event == event and h.action != PREFILL_ACTION and (not h.routes or route in h.routes)
        )

    def answer_prefill(self, route: str) -> str:
        """The text every answer on ``route`` starts with (a ``prefill_answer`` hook), or ``""``.

        The engine continues after it, so the adapter never chooses it; when it
        opens a fenced block (``"```python\n"``) the answer ends at the fence
        that closes the block (``harness.answer_stops``).
        """
        return "".join(h.text for h in self.hooks
                       if h.action == PREFILL_ACTION and (not h.routes or route in h.routes))

    def route_for_adapter(self, name: str) -> str | None:
        """The route whose adapter or served adapter is ``name``, if any."""
        for r, spec in self.router.routes.items():
            if name in (spec.adapter, spec.served_adapter):
                return r
        return None

    def to_document(self) -> dict[str, Any]:
        """The JSON document this model stands for (equal to the loaded file)."""
        return self.model_dump(mode="json")
