"""The route hop: which LoRA specialist takes a new user request.

L0 sees the current request followed by the route prompt of the HCP router
profile (``{{LORA_DESCRIPTIONS}}`` becomes one ``L<n> = description`` line a
route, ``{{ROUTE_LABELS}}`` the labels separated by spaces), and its answer is
prefilled with ``model_id=`` so that the model only has to write the label.
A route prompt that contains ``{{REQUEST}}`` gets the request there instead:
with the request last, everything before it is the same for every request
and the engine's prefix cache holds it (the default route prompt is ~220
tokens that are otherwise prefilled anew on every turn).
Only a canonical label counts: optional spaces, one of the route labels
(any case), then nothing but spaces or punctuation. Anything else, an
unknown label included, is the profile's default route, so the router can
never send a request nowhere. The route hop sees no earlier turns: routing is
a function of the request alone, identical for the stateless and the
stateful proxy paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mindforge.hcp import HCP, ROUTES
from mindforge.hcp.models import REQUEST_PLACEHOLDER

PREFILL = "model_id="
_LABEL = re.compile(r"\s*(L[0-9]+)\s*[.,;:!)\]]*\s*", re.IGNORECASE)


@dataclass(frozen=True)
class RouteDecision:
    route: str
    raw: str  # what the model wrote after the prefill
    parsed: bool  # False when the default route was taken


def lora_descriptions(hcp: HCP) -> str:
    return "\n".join(f"{r} = {' '.join(hcp.router.routes[r].description.split())}" for r in ROUTES)


def route_instruction(hcp: HCP) -> str:
    return (hcp.router.route_prompt.replace("{{LORA_DESCRIPTIONS}}", lora_descriptions(hcp))
            .replace("{{ROUTE_LABELS}}", " ".join(ROUTES)))


def route_messages(hcp: HCP, request: str) -> list[dict[str, str]]:
    """The route hop's conversation (the prompt adds the generation prompt and ``PREFILL``)."""
    messages = [{"role": "system", "content": hcp.router.identity}] if hcp.router.identity.strip() else []
    instruction = route_instruction(hcp)  # filled first: a request's own braces are never placeholders
    if REQUEST_PLACEHOLDER in instruction:
        content = instruction.replace(REQUEST_PLACEHOLDER, request.strip(), 1)
    else:
        content = f"{request.strip()}\n\n{instruction}"
    return [*messages, {"role": "user", "content": content}]


def parse_label(text: str) -> str | None:
    """The canonical label in ``text`` (the completion after the prefill), else None."""
    m = _LABEL.fullmatch(text or "")
    if not m:
        return None
    label = m.group(1).upper()
    return label if label in ROUTES else None


def decide(hcp: HCP, completion_text: str) -> RouteDecision:
    label = parse_label(completion_text)
    return RouteDecision(label or hcp.router.default_route, completion_text, label is not None)
