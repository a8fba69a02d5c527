"""Import a MoL Harness profile folder into an HCP document.

A profile (the format of MindLab-Research/Mixture-of-LoRA-Harness) is four
Markdown files:

- ``lora.md``: one ``## L<n>`` section per route, each with an
  ``adapter_name: NAME`` line and a ``### Description`` section (which ends at
  the next ``###`` heading or the next route);
- ``route.md``: the router instruction, containing ``{{LORA_DESCRIPTIONS}}``
  and ``{{ROUTE_LABELS}}``;
- ``intro.md``: identity text; ``summary.md``: the summary instruction.

The format's rules are enforced with errors naming file, line and problem:
exactly L0-L3, every route with an adapter name and a description, unique
adapter names, both placeholders in the route prompt, and no empty file.
``{{MODEL_NAME}}`` and ``{{BASE_MODEL}}`` are substituted in route, intro and
summary text. A trailing ``model_id=`` line of ``route.md`` is dropped: the
MindForge harness prefills that stem in the assistant turn itself.

The profile only describes the router, so everything else (provider, sampling,
limits, guarded settings, ...) comes from a template HCP document, by default
``mindforge/data/hcp/examples/default.hcp.json``. In a MoL deployment ``adapter_name`` is the
name the engine serves, so it becomes both ``adapter`` and ``served_adapter``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindforge.errors import InputError
from mindforge.hcp.canonical import without_editor_keys
from mindforge.hcp.models import PLACEHOLDERS, ROUTES
from mindforge.hcp.validate import DocumentErrors, parse_hcp, read_json
from mindforge.paths import default_hcp_path

PROFILE_FILES = ("lora.md", "route.md", "intro.md", "summary.md")
_HEADING = re.compile(r"^##\s+(L\d+)\s*$", re.IGNORECASE)
_ADAPTER = re.compile(r"^adapter_name:\s*(\S+)\s*$")
_STEM = re.compile(r"\n*\s*model_id=\s*$")


@dataclass(frozen=True)
class MolRoute:
    label: str
    line: int  # of the `## L<n>` heading, 1-based
    adapter: str
    adapter_line: int
    description: str


def default_template_path() -> Path:
    return default_hcp_path()


def _sections(text: str) -> list[tuple[str, int, list[tuple[int, str]]]]:
    """(label, heading line, [(line number, line)]) per ``## L<n>`` section."""
    out: list[tuple[str, int, list[tuple[int, str]]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _HEADING.fullmatch(line.strip())
        if match:
            out.append((match.group(1).upper(), number, []))
        elif out:
            out[-1][2].append((number, line.rstrip()))
    return out


def _parse_section(
    label: str, line: int, body: list[tuple[int, str]], source: str
) -> tuple[MolRoute | None, list[InputError]]:
    adapter, adapter_line, description, in_description = "", 0, [], False
    for number, raw in body:
        text = raw.strip()
        match = _ADAPTER.fullmatch(text)
        if match and not in_description:
            adapter, adapter_line = match.group(1), number
        elif text == "### Description":
            in_description = True
        elif text.startswith("### "):
            in_description = False
        elif in_description:
            description.append(raw)
    desc = "\n".join(description).strip()
    errors = []
    if not adapter:
        errors.append(
            InputError(source, f"line {line}", f"route {label} has no 'adapter_name: NAME' line")
        )
    if not desc:
        errors.append(
            InputError(
                source,
                f"line {line}",
                f"route {label} has no '### Description' section (or it is empty)",
            )
        )
    if errors:
        return None, errors
    return MolRoute(label, line, adapter, adapter_line, desc), []


def parse_lora_md(text: str, source: str) -> tuple[dict[str, MolRoute], list[InputError]]:
    """Routes of a ``lora.md`` and every rule it breaks."""
    routes: dict[str, MolRoute] = {}
    errors: list[InputError] = []
    sections = _sections(text)
    if not sections:
        return {}, [
            InputError(source, "", "no route sections; expected headings '## L0' to '## L3'")
        ]
    for label, line, body in sections:
        if label not in ROUTES:
            errors.append(
                InputError(
                    source,
                    f"line {line}",
                    f"unknown route {label}; expected exactly L0, L1, L2, L3",
                )
            )
            continue
        if label in routes:
            errors.append(
                InputError(
                    source,
                    f"line {line}",
                    f"route {label} defined twice (first at line {routes[label].line})",
                )
            )
            continue
        route, problems = _parse_section(label, line, body, source)
        errors += problems
        if route is not None:
            routes[label] = route
    defined = {label for label, _, _ in sections}
    for label in ROUTES:
        if label not in defined:
            errors.append(
                InputError(source, "", f"route {label} is missing; expected exactly L0, L1, L2, L3")
            )
    seen: dict[str, MolRoute] = {}
    for route in sorted(routes.values(), key=lambda r: r.line):
        if route.adapter in seen:
            first = seen[route.adapter]
            errors.append(
                InputError(
                    source,
                    f"line {route.adapter_line}",
                    f"adapter name {route.adapter!r} of {route.label} is already used by {first.label}; adapter names must be unique",
                )
            )
        seen.setdefault(route.adapter, route)
    return routes, errors


def _substitute(
    text: str, source: str, values: dict[str, str | None]
) -> tuple[str, list[InputError]]:
    errors = []
    for name, value in values.items():
        token = "{{" + name + "}}"
        if token not in text:
            continue
        if value is None:
            line = text[: text.index(token)].count("\n") + 1
            option = "--" + name.lower().replace("_", "-")
            errors.append(
                InputError(
                    source, f"line {line}", f"uses {token} but no value was given ({option})"
                )
            )
        else:
            text = text.replace(token, value)
    return text, errors


def _read_profile_file(path: Path) -> tuple[str, list[InputError]]:
    if not path.is_file():
        return "", [
            InputError(str(path), "", f"missing; a MoL profile needs {', '.join(PROFILE_FILES)}")
        ]
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        return "", [InputError(str(path), "", "empty file")]
    return text, []


def import_mol_profile(
    directory: str | Path,
    *,
    model_name: str | None = None,
    base_model: str | None = None,
    template: dict[str, Any] | None = None,
    default_route: str = "L0",
) -> dict[str, Any]:
    """An HCP document (valid, as a dict) from a MoL profile folder.

    ``model_name`` defaults to the folder's name (as in MoL); ``base_model``
    has no default: a profile that uses ``{{BASE_MODEL}}`` needs it. Raises
    DocumentErrors listing every problem found, each naming its file.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError(str(folder), "", "not a folder; expected a MoL profile folder")
    values = {"MODEL_NAME": model_name or folder.name, "BASE_MODEL": base_model}
    errors: list[InputError] = []
    texts: dict[str, str] = {}
    for name in PROFILE_FILES:
        text, problems = _read_profile_file(folder / name)
        errors += problems
        if name != "lora.md" and text:
            text, problems = _substitute(text, str(folder / name), values)
            errors += problems
        texts[name] = text
    routes: dict[str, MolRoute] = {}
    if texts["lora.md"]:
        routes, problems = parse_lora_md(texts["lora.md"], str(folder / "lora.md"))
        errors += problems
    route_prompt = _STEM.sub("", texts["route.md"]).strip()
    if texts["route.md"]:
        for token in PLACEHOLDERS:
            if token not in route_prompt:
                errors.append(
                    InputError(
                        str(folder / "route.md"),
                        "",
                        f"missing placeholder {token}; the route prompt must contain {' and '.join(PLACEHOLDERS)}",
                    )
                )
    if errors:
        raise DocumentErrors(str(folder), errors)
    doc = copy.deepcopy(template if template is not None else read_json(default_template_path()))
    doc = without_editor_keys(doc)  # the template's relative $schema would point nowhere from the output
    doc["name"] = (
        re.sub(r"[^A-Za-z0-9_-]", "-", values["MODEL_NAME"] or "mol")[:64].lstrip("-0123456789")
        or "mol"
    )
    doc["description"] = f"Imported from the MoL profile {folder.name}."
    doc["router"] = {
        "identity": texts["intro.md"],
        "route_prompt": route_prompt,
        "summary_prompt": texts["summary.md"],
        "default_route": default_route,
        "routes": {
            label: {"adapter": r.adapter, "served_adapter": r.adapter, "description": r.description}
            for label, r in sorted(routes.items())
        },
    }
    parse_hcp(doc, f"{folder} (imported)")
    return doc
