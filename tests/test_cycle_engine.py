"""The run's services: the embedded engine on the run's catalog adapters, reused when one answers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers import require

from mindforge.settings import load_settings

pytestmark = pytest.mark.model


def _model_ready() -> bool:
    settings = load_settings()
    return (settings.models_dir / settings.model / "config.json").exists()


def test_the_run_engine_serves_the_hcps_adapters_and_is_reused(tmp_path: Path) -> None:
    require(_model_ready(), "the default model is not converted yet (mindforge model pull)")
    from mindforge.run_services import open_run_services

    settings = load_settings().model_copy(update={"engine_url": None, "engine_port": 9})
    logs: list[str] = []
    with open_run_services(settings, tmp_path, 1, log=logs.append) as live:
        assert live.engine_url and live.engine_url != settings.engine_url
        models = httpx.get(f"{live.engine_url}/v1/models", timeout=30).json()["data"]
        names = {m["id"] for m in models}
        # The default HCP serves version 0 of each route from the run's own catalog.
        assert {"mf-L0-v0000", "mf-L1-v0000", "mf-L2-v0000", "mf-L3-v0000"} <= names
        assert all((tmp_path / "adapters" / r / "v0000" / "adapter_model.safetensors").is_file()
                   for r in ("L0", "L1", "L2", "L3"))
        again: list[str] = []
        pointed = settings.model_copy(update={"engine_url": live.engine_url})
        # Another run (this one is locked by its writer) finds the healthy engine and reuses it.
        with open_run_services(pointed, tmp_path / "other", 1, log=again.append) as reused:
            assert reused.engine_url == live.engine_url
        assert any("using the engine at" in m for m in again)
        assert not any("starting" in m for m in again)
    assert any("starting the embedded engine" in m for m in logs)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{live.engine_url}/health", timeout=5)
