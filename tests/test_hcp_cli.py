"""`mindforge hcp ...` through the installed console script, as users run it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mindforge.hcp import hcp_hash, load_hcp, read_json
from mindforge.paths import default_hcp_path, hcp_examples_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(hcp_examples_dir().glob("*.json"))
DEFAULT = default_hcp_path()
MOL = ROOT / "tests" / "fixtures" / "mol_profile"


def mindforge(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("mindforge", path=str(Path(sys.executable).parent)) or shutil.which(
        "mindforge"
    )
    assert exe, "the mindforge console script is not installed"
    return subprocess.run(
        [exe, "hcp", *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_validate_examples_exit_0() -> None:
    assert EXAMPLES
    r = mindforge("validate", *EXAMPLES)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": ok") == len(EXAMPLES)


def test_validate_without_files_checks_the_shipped_examples() -> None:
    r = mindforge("validate")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{p}: ok" for p in EXAMPLES]


def test_validate_reports_one_line_per_error_with_pointer(tmp_path: Path) -> None:
    doc = read_json(DEFAULT)
    doc["router"]["routes"]["L2"]["adapter"] = 3
    del doc["router"]["routes"]["L3"]
    bad = write(tmp_path / "bad.hcp.json", doc)
    notjson = tmp_path / "broken.json"
    notjson.write_text("{")
    r = mindforge("validate", DEFAULT, bad, notjson)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert f"{bad}: /router/routes/L2/adapter: expected string, got number 3" in lines
    assert f"{bad}: /router/routes/L3: missing; this property is required" in lines
    assert any(line.startswith(f"{notjson}: line 1 column 2: not JSON") for line in lines)
    assert len(lines) == 3
    assert f"{DEFAULT}: ok" in r.stdout


def test_hash_matches_library() -> None:
    r = mindforge("hash", DEFAULT)
    assert r.returncode == 0 and r.stdout.strip() == hcp_hash(read_json(DEFAULT))


def test_patch_diff_hash_round(tmp_path: Path) -> None:
    ops = [{"op": "replace", "path": "/provider/sampling/answer/temperature", "value": 0.4}]
    out = tmp_path / "new.hcp.json"
    r = mindforge("patch", DEFAULT, write(tmp_path / "p.json", ops), "-o", out)
    assert r.returncode == 0, r.stderr
    assert load_hcp(out).sampling("answer").temperature == 0.4
    new_hash = mindforge("hash", out).stdout.strip()
    assert new_hash in r.stdout and new_hash != hcp_hash(read_json(DEFAULT))
    d = mindforge("diff", DEFAULT, out)
    assert d.returncode == 1
    assert "changed: /provider/sampling/answer/temperature" in d.stdout
    assert '+        "temperature": 0.4,' in d.stdout
    same = mindforge("diff", DEFAULT, DEFAULT)
    assert same.returncode == 0 and "changed:" not in same.stdout


def test_patch_under_guarded_refused(tmp_path: Path) -> None:
    ops = [{"op": "replace", "path": "/guarded/sandbox/memory_mb", "value": 8192}]
    patch = write(tmp_path / "p.json", ops)
    out = tmp_path / "new.hcp.json"
    r = mindforge("patch", DEFAULT, patch, "-o", out)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"{patch}: /0/path: 'replace' on /guarded/sandbox/memory_mb refused: "
        "/guarded (verifier and sandbox settings) may not be edited"
    )
    assert not out.exists()


def test_patch_with_invalid_result_rejected(tmp_path: Path) -> None:
    ops = [{"op": "remove", "path": "/router/routes/L1"}]
    out = tmp_path / "new.hcp.json"
    r = mindforge("patch", DEFAULT, write(tmp_path / "p.json", ops), "-o", out)
    assert r.returncode == 2 and "/router/routes/L1: missing" in r.stderr
    assert not out.exists()


def test_import_mol(tmp_path: Path) -> None:
    out = tmp_path / "mol.hcp.json"
    r = mindforge(
        "import-mol", MOL, "-o", out, "--model-name", "Forge-Test", "--base-model", "SmolLM2"
    )
    assert r.returncode == 0, r.stderr
    hcp = load_hcp(out)
    assert [hcp.adapter(x) for x in ("L0", "L1", "L2", "L3")] == [
        "forge-chat",
        "forge-tools",
        "forge-code",
        "forge-ui",
    ]
    assert mindforge("validate", out).returncode == 0


@pytest.mark.parametrize("missing", ["placeholder", "base-model"])
def test_import_mol_failure_names_file(tmp_path: Path, missing: str) -> None:
    folder = tmp_path / "prof"
    shutil.copytree(MOL, folder)
    args = ["--base-model", "X"]
    if missing == "placeholder":
        route = folder / "route.md"
        route.write_text(route.read_text().replace("{{ROUTE_LABELS}}", "L0-L3"))
        expect = f"{route}: /: missing placeholder {{{{ROUTE_LABELS}}}}"
    else:
        args = []
        expect = f"{folder / 'intro.md'}: line 1: uses {{{{BASE_MODEL}}}}"
    out = tmp_path / "o.json"
    r = mindforge("import-mol", folder, "-o", out, *args)
    assert r.returncode == 2 and r.stderr.startswith(expect), r.stderr
    assert not out.exists()
