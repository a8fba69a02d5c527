"""Package data is found through importlib.resources; settings relative to a checkout say so when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

import mindforge
from mindforge import paths
from mindforge.discovery import archive
from mindforge.discovery.config import DiscoveryConfig
from mindforge.engine import vllm_backend
from mindforge.errors import InputError
from mindforge.settings import Settings
from mindforge.tasks import benchmarks

PACKAGE = Path(mindforge.__file__).resolve().parent


def test_the_data_is_inside_the_package() -> None:
    for found in (paths.default_hcp_path(), paths.hcp_schemas_dir() / "hcp.schema.json",
                  paths.sandbox_context_dir() / "Dockerfile", paths.sandbox_context_dir() / "runner.py"):
        assert found.is_file() and found.resolve().is_relative_to(PACKAGE / "data")
    assert sorted(p.name for p in paths.seed_tasks_dir().glob("*.jsonl")) == [
        "L0_instructions.jsonl", "L1_tools.jsonl", "L2_python.jsonl", "L3_ui.jsonl"]


def test_a_checkout_resolves_relative_settings_beside_it() -> None:
    root = paths.checkout_root()
    assert root == PACKAGE.parent
    assert paths.resolve_from_checkout(Path("../shared/x"), "s") == (root.parent / "shared" / "x")
    assert paths.resolve_from_checkout(Path("/abs/x"), "s") == Path("/abs/x")


@pytest.fixture
def installed(monkeypatch):
    """As a wheel in site-packages: no checkout above the package."""
    for module in (paths, benchmarks, archive, vllm_backend):
        monkeypatch.setattr(module, "checkout_root", lambda: None)


def test_without_a_checkout_a_relative_setting_is_refused_by_name(installed) -> None:
    with pytest.raises(paths.NoCheckout, match=r"mbpp_dir is ../shared/x, relative to a source checkout.*"
                                               r"set mbpp_dir to an absolute path"):
        paths.resolve_from_checkout(Path("../shared/x"), "mbpp_dir")
    assert paths.resolve_from_checkout(Path("/abs/x"), "mbpp_dir") == Path("/abs/x")


def test_without_a_checkout_mbpp_is_registered_not_built_in(installed, tmp_path) -> None:
    assert benchmarks.builtin() == {}
    with pytest.raises(InputError, match=r"mindforge bench register mbpp FILE"):
        benchmarks.get(tmp_path, "mbpp")


def test_without_a_checkout_discovery_skips_the_default_mbpp_and_refuses_a_configured_one(installed,
                                                                                           tmp_path) -> None:
    assert archive.eval_sources(DiscoveryConfig(run_dir=tmp_path)) == []
    with pytest.raises(paths.NoCheckout, match="mbpp_dir"):
        archive.eval_sources(DiscoveryConfig(run_dir=tmp_path, mbpp_dir=Path("data/mbpp")))
    assert archive.eval_sources(DiscoveryConfig(run_dir=tmp_path, mbpp_dir=tmp_path)) == [tmp_path]


def test_without_a_checkout_vllm_needs_its_python_named(installed) -> None:
    with pytest.raises(vllm_backend.VllmMissing, match="MINDFORGE_VLLM_PYTHON"):
        vllm_backend.vllm_python(Settings())


def test_without_a_checkout_bench_list_says_how_to_register_mbpp(installed, tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from mindforge.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["bench", "list"])
    assert result.exit_code == 0 and result.stdout == ""
    assert "mindforge bench register NAME FILE" in result.stderr
