"""`mindforge tasks import-mbpp`: the real MBPP file converts whole; broken input fails clearly.

The real file lives outside the repository (../shared/data/mbpp, see its
README); tests that need it skip, saying so, where it is absent.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindforge.cli import app
from mindforge.errors import InputError
from mindforge.tasks.io import load_tasks
from mindforge.tasks.mbpp import convert_records, import_mbpp, load_mbpp

ROOT = Path(__file__).resolve().parents[1]
MBPP = (ROOT / ".." / "shared" / "data" / "mbpp" / "sanitized-mbpp.json").resolve()
needs_mbpp = pytest.mark.skipif(
    not MBPP.is_file(), reason=f"MBPP data not present at {MBPP} (it ships outside the repository)"
)

RECORD = {
    "task_id": 7001,
    "prompt": "Write a function to add up the digits of a non-negative integer.",
    "code": "import math\ndef helper(d):\n    return int(d)\n\ndef digit_total(n: int, base=10) -> int:\n"
    "    return sum(helper(d) for d in str(n))\n",
    "test_imports": ["import math"],
    "test_list": [
        "assert digit_total(123) == 6",
        "assert digit_total(0) == 0",
        "assert math.isclose(digit_total(999), 27)",
    ],
}


def records(*edits: tuple[int, str, object]) -> list[dict]:
    recs = [copy.deepcopy(RECORD), {**copy.deepcopy(RECORD), "task_id": 7002}]
    recs[1]["test_list"] = recs[1]["test_list"][:2] + ["assert digit_total(10) == 1"]
    for index, key, value in edits:
        if value is KeyError:
            del recs[index][key]
        else:
            recs[index][key] = value
    return recs


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "mbpp.json"
    path.write_text(json.dumps(data))
    return path


def test_record_converts_to_an_l2_function_task() -> None:
    task = convert_records(records(), "x.json")[0]
    assert task.family == "L2" and task.output_kind == "function"
    assert task.entry_point == "digit_total"  # called by the tests; helper is not
    assert task.prompt.startswith(RECORD["prompt"])
    assert task.prompt.endswith("Write a Python function `digit_total(n: int, base=10) -> int`.")
    assert [t.name for t in task.tests] == ["mbpp-7001-1", "mbpp-7001-2", "mbpp-7001-3"]
    assert [t.code for t in task.tests] == RECORD["test_list"]
    assert task.setup == "import math"
    assert task.reference == RECORD["code"]
    assert task.provenance.source == "mbpp" and task.provenance.extra == {"task_id": 7001}


def test_imports_the_tests_borrow_from_the_reference_move_into_setup() -> None:
    rec = {
        "task_id": 1,
        "prompt": "Size of a tuple in bytes.",
        "code": "import sys\ndef size_of(t):\n    return sys.getsizeof(t)\n",
        "test_imports": [],
        "test_list": ["assert size_of((1, 2)) == sys.getsizeof((1, 2))"] * 3,
    }
    assert convert_records([rec], "x.json")[0].setup == "import sys"


@pytest.mark.parametrize(
    ("edits", "where", "expected"),
    [
        ([(1, "test_list", KeyError)], "[1].test_list", "missing"),
        ([(1, "test_list", [])], "[1].test_list", "at least one assert"),
        ([(0, "test_list", ["x = digit_total(1)"])], "[0].test_list[0]", "single assert"),
        ([(0, "test_list", ["assert (("])], "[0].test_list[0]", "not valid Python"),
        (
            [(1, "test_list", ["assert len('x') == 1"])],
            "[1].test_list",
            "no assert calls a function",
        ),
        ([(1, "code", "def digit_total(:\n")], "[1].code", "not valid Python"),
        ([(0, "task_id", "7")], "[0].task_id", "expected int"),
        ([(0, "task_id", True)], "[0].task_id", "expected int"),
        ([(1, "task_id", 7001)], "[1].task_id", "already used at [0]"),
        ([(0, "prompt", "  ")], "[0].prompt", "non-empty"),
        ([(1, "test_imports", "import math")], "[1].test_imports", "list of strings"),
        ([(1, "test_imports", [3])], "[1].test_imports[0]", "non-empty string"),
        ([(1, "test_imports", ["import"])], "[1].test_imports[0]", "not valid Python"),
    ],
)
def test_bad_record_names_file_and_json_path(
    tmp_path: Path, edits: list, where: str, expected: str
) -> None:
    path = write(tmp_path, records(*edits))
    with pytest.raises(InputError) as info:
        load_mbpp(path)
    assert (info.value.source, info.value.where) == (str(path), where)
    assert expected in info.value.problem, info.value.problem


def test_bad_file_level_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected a JSON list"):
        load_mbpp(write(tmp_path, {"task_id": 1}))
    with pytest.raises(InputError, match=r"\[1\]: expected an object"):
        load_mbpp(write(tmp_path, [RECORD, "nope"]))
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"task_id": 1,\n')
    with pytest.raises(InputError, match=r"broken.json:3:1: not valid JSON"):
        load_mbpp(broken)
    with pytest.raises(InputError, match="no such file"):
        load_mbpp(tmp_path / "absent.json")


def test_failed_import_leaves_the_previous_output_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert import_mbpp(write(tmp_path, records()), out) == 2
    before = out.read_text()
    with pytest.raises(InputError):
        import_mbpp(write(tmp_path, records((1, "test_list", []))), out)
    assert out.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mbpp.json", "out.jsonl"]


def test_cli_reports_bad_input_with_exit_2(tmp_path: Path) -> None:
    src = write(tmp_path, records((1, "test_list", [])))
    result = CliRunner().invoke(
        app, ["tasks", "import-mbpp", str(src), "-o", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code == 2
    assert f"{src}:[1].test_list:" in result.stderr
    assert not (tmp_path / "o.jsonl").exists()


@needs_mbpp
def test_all_of_real_mbpp_converts(tmp_path: Path) -> None:
    out = tmp_path / "mbpp.jsonl"
    exe = shutil.which("mindforge", path=str(Path(sys.executable).parent))
    assert exe, "the mindforge console script is not installed"
    proc = subprocess.run(
        [exe, "tasks", "import-mbpp", str(MBPP), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "converted 427 MBPP records" in proc.stdout
    tasks = load_tasks(out)  # ids unique and matching content
    raw = json.loads(MBPP.read_text())
    assert len(tasks) == len(raw) == 427
    for task, rec in zip(tasks, raw, strict=True):
        assert task.provenance.extra == {"task_id": rec["task_id"]}
        assert len(task.tests) == len(rec["test_list"])
        # MBPP sometimes writes "f (x)": match the call, not the spacing
        assert all(re.search(rf"\b{task.entry_point}\s*\(", t.code) for t in task.tests)
        assert f"`{task.entry_point}(" in task.prompt
        assert task.reference == rec["code"]
