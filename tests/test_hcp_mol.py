"""Importing a MoL Harness profile folder (lora.md, route.md, intro.md, summary.md).

Broken profiles are made by copying ``tests/fixtures/mol_profile`` and
changing one thing, so each test shows exactly which rule the import enforces.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mindforge.errors import InputError
from mindforge.hcp import DocumentErrors, hcp_hash, parse_hcp, validate_document
from mindforge.hcp.mol import import_mol_profile, parse_lora_md

FIXTURE = Path(__file__).parent / "fixtures" / "mol_profile"
ADAPTERS = {"L0": "forge-chat", "L1": "forge-tools", "L2": "forge-code", "L3": "forge-ui"}


def copy_profile(tmp_path: Path) -> Path:
    target = tmp_path / "Forge-Test"
    shutil.copytree(FIXTURE, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture changed: {old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1))


def import_errors(folder: Path, **kw) -> list[InputError]:
    kw.setdefault("base_model", "SmolLM2-135M-Instruct")
    with pytest.raises(DocumentErrors) as info:
        import_mol_profile(folder, **kw)
    return info.value.errors


def test_fixture_imports_four_routes() -> None:
    doc = import_mol_profile(FIXTURE, model_name="Forge-Test", base_model="SmolLM2-135M-Instruct")
    assert validate_document(doc) == []
    hcp = parse_hcp(doc)
    assert {r: s.adapter for r, s in hcp.router.routes.items()} == ADAPTERS
    assert {r: s.served_adapter for r, s in hcp.router.routes.items()} == ADAPTERS
    assert hcp.router.routes["L2"].description == (
        "Python programming: write or repair a function that satisfies a written specification"
    )
    # the description ends at the next ### heading
    assert hcp.router.routes["L0"].description.endswith("obey an exact output format")
    assert "Notes" not in hcp.router.routes["L0"].description
    assert "dispatcher of Forge-Test" in hcp.router.route_prompt
    assert "{{LORA_DESCRIPTIONS}}" in hcp.router.route_prompt
    assert not hcp.router.route_prompt.rstrip().endswith("model_id=")  # the harness prefills it
    assert "built on SmolLM2-135M-Instruct" in hcp.router.identity
    assert "{{" not in hcp.router.identity + hcp.router.summary_prompt
    assert hcp.name == "Forge-Test"
    # everything but the router comes from the default template
    assert hcp.provider.model == "smollm2-135m-instruct"


def test_model_name_defaults_to_folder_and_import_is_deterministic(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    a = import_mol_profile(folder, base_model="B")
    b = import_mol_profile(folder, base_model="B")
    assert hcp_hash(a) == hcp_hash(b)
    assert "You are Forge-Test," in a["router"]["identity"]


def test_missing_route(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    lora = folder / "lora.md"
    lora.write_text(lora.read_text().split("## L3")[0])
    errors = import_errors(folder)
    assert [(e.source, e.problem) for e in errors] == [
        (str(lora), "route L3 is missing; expected exactly L0, L1, L2, L3")
    ]


def test_extra_and_duplicate_routes(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    lora = folder / "lora.md"
    text = lora.read_text()
    lora.write_text(
        text
        + "\n## L4\n\nadapter_name: x\n\n### Description\n\nmore\n\n## L1\n\nadapter_name: y\n\n### Description\n\nagain\n"
    )
    problems = [f"{e.where}: {e.problem}" for e in import_errors(folder)]
    n = text.count("\n")
    assert problems == [
        f"line {n + 2}: unknown route L4; expected exactly L0, L1, L2, L3",
        f"line {n + 10}: route L1 defined twice (first at line 16)",
    ]


def test_missing_adapter_name(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "lora.md", "adapter_name: forge-code\n", "")
    (err,) = import_errors(folder)
    assert err.source == str(folder / "lora.md")
    assert err.where == "line 25"  # the `## L2` heading
    assert "route L2 has no 'adapter_name: NAME' line" in err.problem


def test_missing_description(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "lora.md", "### Description\n\nPython programming", "Python programming")
    (err,) = import_errors(folder)
    assert err.source.endswith("lora.md") and "route L2 has no '### Description'" in err.problem


def test_duplicate_adapter_names(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "lora.md", "adapter_name: forge-ui", "adapter_name: forge-chat")
    (err,) = import_errors(folder)
    assert err.source.endswith("lora.md") and err.where.startswith("line ")
    assert "adapter name 'forge-chat' of L3 is already used by L0" in err.problem


@pytest.mark.parametrize("token", ["{{LORA_DESCRIPTIONS}}", "{{ROUTE_LABELS}}"])
def test_missing_placeholder(tmp_path: Path, token: str) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "route.md", token, "the list")
    (err,) = import_errors(folder)
    assert err.source == str(folder / "route.md")
    assert f"missing placeholder {token}" in err.problem


def test_base_model_needed_when_used(tmp_path: Path) -> None:
    (err,) = import_errors(copy_profile(tmp_path), base_model=None)
    assert err.source.endswith("intro.md") and err.where == "line 1"
    assert "{{BASE_MODEL}}" in err.problem and "--base-model" in err.problem


@pytest.mark.parametrize("name", ["lora.md", "route.md", "intro.md", "summary.md"])
def test_missing_or_empty_file(tmp_path: Path, name: str) -> None:
    folder = copy_profile(tmp_path)
    (folder / name).unlink()
    (err,) = import_errors(folder)
    assert err.source == str(folder / name) and err.problem.startswith("missing")
    (folder / name).write_text("  \n")
    (err,) = import_errors(folder)
    assert err.source == str(folder / name) and err.problem == "empty file"


def test_several_problems_reported_together(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "lora.md", "adapter_name: forge-code\n", "")
    edit(folder / "route.md", "{{ROUTE_LABELS}}", "labels")
    files = sorted(Path(e.source).name for e in import_errors(folder))
    assert files == ["lora.md", "route.md"]


def test_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a folder"):
        import_mol_profile(tmp_path / "nope")


def test_parse_lora_md_without_sections() -> None:
    routes, errors = parse_lora_md("# nothing here\n", "x.md")
    assert routes == {} and "no route sections" in errors[0].problem


def test_imported_adapter_name_must_fit_the_schema(tmp_path: Path) -> None:
    folder = copy_profile(tmp_path)
    edit(folder / "lora.md", "adapter_name: forge-code", "adapter_name: forge/code")
    errors = import_errors(folder)
    assert [e.where for e in errors] == [
        "/router/routes/L2/adapter",
        "/router/routes/L2/served_adapter",
    ]
