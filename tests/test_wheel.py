"""The wheel works without the checkout: built, installed into a bare folder, run from elsewhere.

Only the package's own files go into the wheel's build (a copy of pyproject,
README, LICENSE and ``mindforge/``), so stale ``build/`` output or stray
top-level folders in the checkout cannot hide a missing declaration. The
build runs without isolation (no download: setuptools is the venv's) and the
install takes no dependencies: they are this venv's, found through its
python, while ``PYTHONPATH`` holds only the installed wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

from mindforge.paths import hcp_examples_dir, seed_tasks_dir
from mindforge.sandbox.config import SandboxConfig
from mindforge.sandbox.image import image_tag
from mindforge.tasks.io import load_tasks


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, f"{argv}: exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the built wheel, the folder it is installed in)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "mindforge", src / "mindforge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
          "-w", str(tmp / "dist"), str(src)], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("mindforge-*.whl")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(tmp / "site"),
          str(wheel)], cwd=tmp)
    return wheel, tmp / "site"


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(site)}


def test_the_wheel_holds_the_package_and_its_data_and_no_top_level_flows(installed) -> None:
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"mindforge", wheel.name.split("-py3")[0] + ".dist-info"}
    data = REPO / "mindforge" / "data"
    shipped = {p.relative_to(REPO).as_posix() for p in data.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert shipped and shipped <= set(names)
    assert "mindforge/flows/rsi_cycle.py" in names


def test_the_installed_package_finds_its_data_without_the_checkout(installed, tmp_path) -> None:
    _, site = installed
    probe = (
        "import json, mindforge\n"
        "from mindforge.paths import checkout_root, seed_tasks_dir\n"
        "from mindforge.sandbox.config import SandboxConfig\n"
        "from mindforge.sandbox.image import image_tag\n"
        "from mindforge.tasks.io import load_tasks\n"
        "print(json.dumps({'file': mindforge.__file__, 'checkout': str(checkout_root()),\n"
        "                  'seeds': [t.id for t in load_tasks(seed_tasks_dir())],\n"
        "                  'tag': image_tag(SandboxConfig())}))\n"
    )
    got = json.loads(_run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(site)).stdout)
    assert Path(got["file"]).is_relative_to(site) and got["checkout"] == "None"
    assert got["seeds"] == [t.id for t in load_tasks(seed_tasks_dir())]
    # The sandbox context hashes the same wherever it is installed: the image built from a checkout serves.
    assert got["tag"] == image_tag(SandboxConfig())


def test_the_console_script_validates_the_shipped_hcp_examples(installed, tmp_path) -> None:
    wheel, site = installed
    mindforge = site / "bin" / "mindforge"  # the wheel's entry point, as pip wrote it
    version = _run([str(mindforge), "--version"], cwd=tmp_path, env=_env(site)).stdout.strip()
    assert version == "mindforge " + wheel.name.split("-")[1]
    out = _run([str(mindforge), "hcp", "validate"], cwd=tmp_path, env=_env(site)).stdout.splitlines()
    examples = sorted(p.name for p in hcp_examples_dir().glob("*.json"))
    assert out == [f"{site / 'mindforge' / 'data' / 'hcp' / 'examples' / name}: ok" for name in examples]
