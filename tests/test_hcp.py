"""HCP library: schema/pydantic agreement, pointer errors, hash, patch, diff.

Test documents are made from the default example by the JSON Patches in
``tests/fixtures/hcp/cases.json`` (applied with plain ``jsonpatch``, not with
the code under test), so each broken case differs from a valid document in
exactly the way its id says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonpatch
import pytest
from pydantic import ValidationError

from mindforge.errors import InputError, pydantic_problems
from mindforge.hcp import (
    HCP,
    DocumentErrors,
    canonical_json,
    hcp_hash,
    load_hcp,
    parse_hcp,
    pretty_json,
    read_json,
    schema_dir,
    validate_document,
    without_editor_keys,
)
from mindforge.hcp.diff import changed_pointers, diff_documents
from mindforge.hcp.patch import apply_patch, guarded_violations, served_adapter_patch, serving_patch
from mindforge.hcp.semantics import semantic_problems
from mindforge.hcp.validate import schema_validator
from mindforge.paths import default_hcp_path, hcp_examples_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(hcp_examples_dir().glob("*.json"))
CASES = json.loads((ROOT / "tests" / "fixtures" / "hcp" / "cases.json").read_text())
DEFAULT = read_json(default_hcp_path())


def make(patch: list) -> object:
    return jsonpatch.apply_patch(DEFAULT, patch)


def schema_ok(doc: object) -> bool:
    return schema_validator().is_valid(doc)


def pydantic_result(doc: object) -> tuple[bool, list[str]]:
    try:
        HCP.from_document(doc)
    except ValidationError as exc:
        return False, [p for p, _ in pydantic_problems(exc)]
    return True, []


# --- the schema itself -----------------------------------------------------


def _properties(node: object, where: str = "#"):
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{where}/properties/{name}", sub
        for key, sub in node.items():
            yield from _properties(sub, f"{where}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _properties(sub, f"{where}/{i}")


@pytest.mark.parametrize("path", sorted(schema_dir().glob("*.schema.json")), ids=lambda p: p.name)
def test_schema_files_are_draft_2020_12_with_descriptions(path: Path) -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/" + path.name)
    assert schema.get("description")
    missing = [
        w
        for w, sub in _properties(schema)
        if not (isinstance(sub, dict) and sub.get("description"))
    ]
    assert not missing, f"properties without a description: {missing}"


# --- examples and good documents -------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_load_and_round_trip(path: Path) -> None:
    doc = read_json(path)
    assert validate_document(doc, str(path)) == []
    hcp = load_hcp(path)
    assert canonical_json(hcp.to_document()) == canonical_json(doc)
    assert hcp_hash(hcp) == hcp_hash(doc)
    assert hcp.router.default_route in hcp.router.routes


@pytest.mark.parametrize("case", CASES["good"], ids=lambda c: c["id"])
def test_good_documents_accepted_by_both(case: dict) -> None:
    doc = make(case["patch"])
    assert schema_ok(doc)
    assert pydantic_result(doc) == (True, [])
    assert validate_document(doc) == []
    assert hcp_hash(HCP.from_document(doc)) == hcp_hash(doc)


# --- broken documents --------------------------------------------------------


@pytest.mark.parametrize("case", CASES["broken"], ids=lambda c: c["id"])
def test_broken_documents_fail_with_pointer_and_validators_agree(case: dict) -> None:
    doc = make(case["patch"])
    errors = validate_document(doc, "case.json")
    pointers = [e.where for e in errors]
    assert case["pointer"] in pointers, [str(e) for e in errors]
    assert all(e.source == "case.json" and e.problem for e in errors)
    pyd_ok, pyd_pointers = pydantic_result(doc)
    assert not pyd_ok
    if case["kind"] == "schema":
        assert not schema_ok(doc)
        # pydantic names the same place, or an enclosing / enclosed one
        want = case["pointer"]
        assert any(p.startswith(want) or want.startswith(p) for p in pyd_pointers), pyd_pointers
    else:
        # rules JSON Schema cannot express: the schema accepts, the model refuses
        assert schema_ok(doc)


def test_load_hcp_names_file_pointer_and_expectation(tmp_path: Path) -> None:
    doc = make([{"op": "replace", "path": "/router/routes/L2/adapter", "value": 7}])
    path = tmp_path / "bad.hcp.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DocumentErrors) as info:
        load_hcp(path)
    assert isinstance(info.value, InputError)
    text = str(info.value)
    assert str(path) in text and "/router/routes/L2/adapter" in text and "expected string" in text


def test_all_errors_reported_at_once() -> None:
    doc = make(
        [
            {"op": "remove", "path": "/router/routes/L3"},
            {"op": "replace", "path": "/provider/sampling/answer/temperature", "value": 9},
            {"op": "add", "path": "/surprise", "value": True},
        ]
    )
    pointers = {e.where for e in validate_document(doc)}
    assert {"/router/routes/L3", "/provider/sampling/answer/temperature", "/surprise"} <= pointers


def test_not_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{\n  "format": \n}')
    with pytest.raises(InputError) as info:
        load_hcp(path)
    assert info.value.where.startswith("line 3") and str(path) in str(info.value)


def test_long_values_are_shortened_in_messages() -> None:
    doc = make([{"op": "replace", "path": "/router/route_prompt", "value": "x" * 5000}])
    messages = [e.problem for e in validate_document(doc)]
    assert messages and all(len(m) < 200 for m in messages)


# --- model behaviour ---------------------------------------------------------


def test_model_views_and_frozen() -> None:
    hcp = parse_hcp(DEFAULT)
    assert hcp.served_adapter("L2") == "mf-L2-v0000"
    assert hcp.adapter("L3") == "mf-L3"
    assert hcp.router.routes["L2"].description.startswith("coding")
    assert hcp.sampling("route").temperature == 0.0
    assert hcp.route_for_adapter("mf-L1-v0000") == "L1"
    assert [s.name for s in hcp.skills_for("L2")] == ["python_function"]
    assert [h.event for h in hcp.hooks_for("after_tool_result", "L1")] == ["after_tool_result"]
    assert hcp.hooks_for("after_tool_result", "L2") == ()
    with pytest.raises(KeyError):
        hcp.sampling("judge")
    with pytest.raises(ValidationError):
        hcp.name = "other"  # type: ignore[misc]


# --- canonical JSON and hash -------------------------------------------------


def test_canonical_json_and_hash() -> None:
    a = {"b": 1, "a": [1.0, "é"], "c": {"y": 2.5, "x": None}}
    b = {"c": {"x": None, "y": 2.5}, "a": [1, "é"], "b": 1.0}
    assert canonical_json(a) == '{"a":[1,"é"],"b":1,"c":{"x":null,"y":2.5}}'
    assert hcp_hash(a) == hcp_hash(b)
    assert hcp_hash(a) != hcp_hash({**a, "b": 2})
    h = hcp_hash(DEFAULT)
    assert h.startswith("h-") and len(h) == 18 and set(h[2:]) <= set("0123456789abcdef")
    # pretty text keeps what editors read ($schema); the canonical one is the meaning only
    assert json.loads(pretty_json(DEFAULT)) == {**json.loads(canonical_json(DEFAULT)), "$schema": DEFAULT["$schema"]}


# --- $schema: for editors, not part of the meaning ---------------------------------


def test_default_example_points_editors_at_the_schema_by_relative_path() -> None:
    path = default_hcp_path()
    target = (path.parent / DEFAULT["$schema"]).resolve()
    assert target == (schema_dir() / "hcp.schema.json").resolve()
    schema = json.loads(target.read_text())
    assert schema["$id"] == schema_validator().schema["$id"]
    # editors resolve each $ref against the file they loaded: every one names a sibling file
    refs = {m for f in schema_dir().glob("*.schema.json")
            for m in re.findall(r'"\$ref":\s*"([^"#][^"]*)"', f.read_text())}
    assert refs and all((schema_dir() / r.split("#")[0]).is_file() for r in refs), refs


def test_schema_key_is_accepted_and_changes_no_version(tmp_path: Path) -> None:
    bare = without_editor_keys(DEFAULT)
    assert "$schema" not in bare and validate_document(bare) == []
    for where in ("../schemas/hcp.schema.json", "https://mindforge.dev/schemas/hcp/1/hcp.schema.json"):
        doc = {**bare, "$schema": where}
        assert validate_document(doc) == []
        assert hcp_hash(doc) == hcp_hash(bare) == hcp_hash(HCP.from_document(doc))
        assert HCP.model_validate(doc) == HCP.from_document(bare)
        assert diff_documents(bare, doc).paths == ()
    file = tmp_path / "x.hcp.json"
    file.write_text(pretty_json(DEFAULT))
    assert load_hcp(file) == HCP.from_document(bare)
    assert read_json(file)["$schema"] == DEFAULT["$schema"]


@pytest.mark.parametrize("value", [None, "", 3, ["x"]])
def test_malformed_schema_key_is_refused_by_schema_and_model(value: object) -> None:
    doc = {**DEFAULT, "$schema": value}
    assert [e.where for e in validate_document(doc)] == ["/$schema"]
    assert pydantic_result(doc)[0] is False


# --- patch ---------------------------------------------------------------------


def test_patch_applies_and_revalidates() -> None:
    ops = [
        {"op": "replace", "path": "/provider/sampling/answer/temperature", "value": 0.5},
        {"op": "replace", "path": "/skills/1/enabled", "value": False},
        {"op": "test", "path": "/format", "value": "mindforge.hcp/1"},
    ]
    before = canonical_json(DEFAULT)
    new = apply_patch(DEFAULT, ops)
    assert canonical_json(DEFAULT) == before  # input untouched
    hcp = parse_hcp(new)
    assert hcp.sampling("answer").temperature == 0.5 and not hcp.skills[1].enabled
    assert hcp_hash(new) != hcp_hash(DEFAULT)


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "path": "/guarded/sandbox/memory_mb", "value": 4096},
        {"op": "remove", "path": "/guarded"},
        {"op": "add", "path": "/guarded/verifier/extra", "value": 1},
        {"op": "move", "from": "/guarded/verifier", "path": "/limits/verifier"},
        {"op": "copy", "from": "/limits", "path": "/guarded/sandbox"},
        {"op": "test", "path": "/guarded/verifier/reward", "value": "binary"},
        {"op": "replace", "path": "", "value": {}},
    ],
    ids=lambda op: f"{op['op']}:{op.get('from', '')}>{op['path']}",
)
def test_patch_under_guarded_refused_before_applying(op: dict) -> None:
    ops = [{"op": "replace", "path": "/limits/max_tool_turns", "value": 2}, op]
    with pytest.raises(DocumentErrors) as info:
        apply_patch(DEFAULT, ops, "edit.json")
    err = info.value.errors[0]
    assert err.source == "edit.json" and err.where.startswith("/1/")
    assert "/guarded" in err.problem and "may not be edited" in err.problem
    assert len(guarded_violations(ops)) == 1


def test_guarded_prefix_is_exact() -> None:
    # "/guardedness" is not under "/guarded"; it is refused by validation instead
    with pytest.raises(DocumentErrors) as info:
        apply_patch(DEFAULT, [{"op": "add", "path": "/guardedness", "value": 1}])
    assert [e.where for e in info.value.errors] == ["/guardedness"]
    assert "unknown property" in info.value.errors[0].problem


@pytest.mark.parametrize(
    ("ops", "where"),
    [
        ([{"op": "remove", "path": "/router/routes/L1"}], "/router/routes/L1"),
        (
            [{"op": "replace", "path": "/router/routes/L1/adapter", "value": "mf-L0"}],
            "/router/routes/L1/adapter",
        ),
        (
            [{"op": "replace", "path": "/router/route_prompt", "value": "Pick."}],
            "/router/route_prompt",
        ),
    ],
)
def test_patch_with_invalid_result_rejected_with_pointer(ops: list, where: str) -> None:
    with pytest.raises(DocumentErrors) as info:
        apply_patch(DEFAULT, ops, "edit.json")
    assert where in [e.where for e in info.value.errors]
    assert "patched document" in info.value.errors[0].source


@pytest.mark.parametrize(
    ("ops", "where"),
    [
        ({"op": "add"}, "/"),
        ([{"op": "frobnicate", "path": "/x"}], "/0/op"),
        ([{"op": "replace", "path": "name", "value": "x"}], "/0/path"),
        ([{"op": "replace", "path": "/name"}], "/0/value"),
        ([{"op": "move", "path": "/name"}], "/0/from"),
        ([{"op": "remove", "path": "/skills/9"}], "/0"),
        ([{"op": "test", "path": "/name", "value": "other"}], "/0"),
    ],
)
def test_malformed_or_failing_patch(ops: object, where: str) -> None:
    with pytest.raises(DocumentErrors) as info:
        apply_patch(DEFAULT, ops, "edit.json")
    assert info.value.errors[0].where == where


# --- diff ------------------------------------------------------------------------


def test_diff_lists_pointers_and_unified_text() -> None:
    new = apply_patch(
        DEFAULT,
        [
            {"op": "replace", "path": "/system/L2", "value": "Write Python."},
            {
                "op": "add",
                "path": "/hooks/-",
                "value": {
                    "event": "task_end",
                    "action": "append_system",
                    "text": "Check your answer.",
                    "routes": [],
                },
            },
        ],
    )
    d = diff_documents(DEFAULT, new, "old.json", "new.json")
    assert d.paths == ("/hooks/2", "/system/L2")
    assert d.old_hash == hcp_hash(DEFAULT) and d.new_hash == hcp_hash(new)
    assert d.unified.startswith("--- old.json\n+++ new.json\n")
    assert '+    "L2": "Write Python."' in d.unified
    assert "`/system/L2`" in d.markdown()
    same = diff_documents(DEFAULT, json.loads(canonical_json(DEFAULT)))
    assert not same.changed and same.unified == ""


def test_changed_pointers_escapes_and_types() -> None:
    assert changed_pointers({"a/b": 1, "t~": [1]}, {"a/b": 2, "t~": [1, 2]}) == ["/a~1b", "/t~0/1"]
    assert changed_pointers({"x": 1}, {"x": True}) == ["/x"]
    assert changed_pointers({"x": 1}, {"x": 1.0}) == ["/x"]  # callers canonicalise first
    assert changed_pointers(1, 2) == ["/"]


def test_duplicate_keys_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(InputError, match="'name' appears twice"):
        read_json(path)


def test_served_adapter_patch() -> None:
    new = apply_patch(DEFAULT, served_adapter_patch("L2", "mf-L2-v0001"))
    assert parse_hcp(new).served_adapter("L2") == "mf-L2-v0001"
    assert diff_documents(DEFAULT, new).paths == ("/router/routes/L2/served_adapter",)


def test_serving_patch_moves_every_routes_adapter_version_and_nothing_else() -> None:
    trained = apply_patch(DEFAULT, served_adapter_patch("L0", "mf-L0-v0003") + served_adapter_patch("L2", "mf-L2-v0007"))
    edited = apply_patch(DEFAULT, [{"op": "replace", "path": "/router/route_prompt", "value": DEFAULT["router"]["route_prompt"] + " Be brief."}])
    both = parse_hcp(apply_patch(edited, serving_patch(parse_hcp(trained))))
    assert (both.served_adapter("L0"), both.served_adapter("L2")) == ("mf-L0-v0003", "mf-L2-v0007")
    assert diff_documents(edited, both.to_document()).paths == ("/router/routes/L0/served_adapter",
                                                                "/router/routes/L2/served_adapter")


_DELETE = object()


def _leaves(obj: object, at: tuple = ()):
    if at:
        yield at
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*at, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*at, i))


def test_schema_and_models_agree_on_every_single_field_mutation() -> None:
    """Each field of a document set to values of every JSON type, or deleted:
    JSON Schema (plus the semantic rules) and pydantic must give the same verdict."""
    base = make(
        [
            {
                "op": "add",
                "path": "/tools/-",
                "value": {
                    "type": "function",
                    "function": {"name": "t", "description": "", "parameters": {"type": "object"}},
                },
            }
        ]
    )
    values = [None, "x", "", -1, 0, 1.5, True, [], {}, ["L0"], _DELETE]
    disagreements, checked = [], 0
    for path in list(_leaves(base)):
        for value in values:
            doc = json.loads(json.dumps(base))
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if value is _DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            s_ok = schema_ok(doc) and not semantic_problems(doc)
            p_ok = pydantic_result(doc)[0]
            checked += 1
            if s_ok != p_ok:
                disagreements.append((path, value, s_ok, p_ok))
    assert checked > 1000 and not disagreements, disagreements[:10]


def test_model_validate_on_a_plain_dict_matches_from_document() -> None:
    assert HCP.model_validate(DEFAULT) == HCP.from_document(DEFAULT)
