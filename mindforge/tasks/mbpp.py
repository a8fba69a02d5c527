"""MBPP JSON records -> L2 function tasks.

The input is the format of MBPP's sanitized release: one JSON list of records
with ``task_id`` (int), ``prompt`` (one sentence), ``code`` (the reference),
``test_imports`` (import lines the tests need) and ``test_list`` (``assert``
lines). Other keys (``source_file``) are ignored.

Each record becomes one Task: the entry point is the function the asserts
call that ``code`` defines at top level, the tests are the assert lines one
each (a test passes when its line runs without raising, as the checker
convention in ``models`` requires), and ``setup`` holds the imports. MBPP's
one-sentence prompts do not name the function, which the hidden tests call
by name, so the prompt gains one line with the reference's signature.

MBPP is an external, sealed evaluation set (see ../shared/data/mbpp/README.md):
importing it makes evaluation tasks, never seeds for Discovery.

Errors name the file and a JSON path such as ``[12].test_list[1]``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from mindforge.errors import InputError
from mindforge.tasks.io import dump_jsonl
from mindforge.tasks.models import CheckerTest, Provenance, Task

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def load_mbpp(src: Path) -> list[Task]:
    """Read an MBPP JSON file and convert every record; any bad record raises InputError."""
    src = Path(src)
    try:
        text = src.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(src), "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(src), "", f"cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            str(src), f"{exc.lineno}:{exc.colno}", f"not valid JSON: {exc.msg}"
        ) from None
    return convert_records(data, str(src))


def import_mbpp(src: Path, out: Path) -> int:
    """Convert ``src`` and write the tasks to ``out`` as JSONL (atomically); returns the count.

    Nothing is written unless every record converts.
    """
    return dump_jsonl(load_mbpp(src), Path(out))


def convert_records(data: Any, source: str) -> list[Task]:
    """Tasks from parsed MBPP JSON (a list of records); ``source`` names the file in errors."""
    if not isinstance(data, list):
        raise InputError(source, "", f"expected a JSON list of MBPP records, got {_kind(data)}")
    tasks: list[Task] = []
    seen_ids: dict[int, int] = {}
    seen_tasks: dict[str, int] = {}
    for i, record in enumerate(data):
        task = convert_record(record, source, f"[{i}]")
        task_id = task.provenance.extra["task_id"]
        if task_id in seen_ids:
            raise InputError(
                source, f"[{i}].task_id", f"task_id {task_id} already used at [{seen_ids[task_id]}]"
            )
        if task.id in seen_tasks:
            raise InputError(source, f"[{i}]", f"same task as [{seen_tasks[task.id]}]")
        seen_ids[task_id] = i
        seen_tasks[task.id] = i
        tasks.append(task)
    return tasks


def convert_record(record: Any, source: str, where: str) -> Task:
    """One MBPP record -> Task; ``where`` is the record's JSON path, e.g. ``[12]``."""
    if not isinstance(record, dict):
        raise InputError(source, where, f"expected an object (MBPP record), got {_kind(record)}")
    task_id = _field(record, "task_id", int, source, where)
    prompt = _field(record, "prompt", str, source, where).strip()
    code = _field(record, "code", str, source, where)
    imports = _str_list(record, "test_imports", source, where, allow_empty=True)
    asserts = _str_list(record, "test_list", source, where, allow_empty=False)
    if not prompt:
        raise InputError(source, f"{where}.prompt", "expected a non-empty string")
    for n, line in enumerate(imports):
        try:
            ast.parse(line.strip())
        except SyntaxError as exc:
            raise InputError(
                source, f"{where}.test_imports[{n}]", f"not valid Python: {exc.msg}"
            ) from None
    defs = _top_level_functions(code, source, f"{where}.code")
    entry = _entry_point(asserts, defs, source, where)
    return Task(
        family="L2",
        prompt=f"{prompt}\n\nWrite a Python function `{signature(defs[entry])}`.",
        output_kind="function",
        entry_point=entry,
        tests=tuple(
            CheckerTest(name=f"mbpp-{task_id}-{n}", code=line.strip())
            for n, line in enumerate(asserts, 1)
        ),
        setup="\n".join(
            dict.fromkeys([line.strip() for line in imports] + _imports_tests_borrow(code, asserts))
        ),
        reference=code,
        provenance=Provenance(source="mbpp", extra={"task_id": task_id}),
    )


def signature(fn: FunctionNode) -> str:
    """``name(args) -> ret`` as written in the source (annotations and defaults kept)."""
    text = f"{fn.name}({ast.unparse(fn.args)})"
    if fn.returns is not None:
        text += f" -> {ast.unparse(fn.returns)}"
    return text


def _entry_point(asserts: list[str], defs: dict[str, FunctionNode], source: str, where: str) -> str:
    """The defined function the asserts call: one called by every assert, else the first called.

    Within an assert the outermost call comes first (``ast.walk`` is breadth-first),
    so ``assert f(g(x)) == y`` picks ``f`` when both are defined.
    """
    called_per_assert: list[list[str]] = []
    for n, line in enumerate(asserts):
        loc = f"{where}.test_list[{n}]"
        try:
            tree = ast.parse(line.strip())
        except SyntaxError as exc:
            raise InputError(source, loc, f"not valid Python: {exc.msg}") from None
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
            raise InputError(source, loc, "expected a single assert statement")
        called = [
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in defs
        ]
        called_per_assert.append(list(dict.fromkeys(called)))
    ordered = list(dict.fromkeys(name for names in called_per_assert for name in names))
    if not ordered:
        raise InputError(
            source,
            f"{where}.test_list",
            f"no assert calls a function defined in code (defined: {', '.join(defs) or 'none'})",
        )
    everywhere = [name for name in ordered if all(name in names for names in called_per_assert)]
    return (everywhere or ordered)[0]


def _imports_tests_borrow(code: str, asserts: list[str]) -> list[str]:
    """Top-level imports of ``code`` whose names the asserts use.

    MBPP's harness ran tests in the reference's namespace, so a few asserts use a
    module only the reference imports (task 596 calls ``sys.getsizeof``). Here
    the candidate runs in another process, so such imports move into ``setup``.
    """
    used = {
        node.id
        for line in asserts
        for node in ast.walk(ast.parse(line.strip()))
        if isinstance(node, ast.Name)
    }
    borrowed = []
    for stmt in ast.parse(code).body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in stmt.names}
            if bound & used:
                borrowed.append(ast.unparse(stmt))
    return borrowed


def _top_level_functions(code: str, source: str, where: str) -> dict[str, FunctionNode]:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise InputError(
            source, where, f"not valid Python (line {exc.lineno}): {exc.msg}"
        ) from None
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _field(record: dict[str, Any], key: str, kind: type, source: str, where: str) -> Any:
    if key not in record:
        raise InputError(source, f"{where}.{key}", f"missing (expected {kind.__name__})")
    value = record[key]
    # bool is an int subclass; a task_id of true is a mistake, not 1
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(source, f"{where}.{key}", f"expected {kind.__name__}, got {_kind(value)}")
    return value


def _str_list(
    record: dict[str, Any], key: str, source: str, where: str, allow_empty: bool
) -> list[str]:
    if key not in record:
        raise InputError(source, f"{where}.{key}", "missing (expected a list of strings)")
    value = record[key]
    if not isinstance(value, list):
        raise InputError(
            source, f"{where}.{key}", f"expected a list of strings, got {_kind(value)}"
        )
    if not value and not allow_empty:
        raise InputError(
            source, f"{where}.{key}", "expected at least one assert line, got an empty list"
        )
    for n, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise InputError(
                source, f"{where}.{key}[{n}]", f"expected a non-empty string, got {_kind(item)}"
            )
    return value


def _kind(value: Any) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }
    if isinstance(value, str):
        return "an empty string" if not value.strip() else "a string"
    return names.get(type(value), type(value).__name__)
