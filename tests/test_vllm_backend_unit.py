"""The vLLM command line and launcher choice, without vLLM (tests/test_vllm_engine.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindforge.engine.launch import EngineProcess
from mindforge.engine.vllm_backend import VllmMissing, vllm_command, vllm_env, vllm_python
from mindforge.errors import InputError
from mindforge.settings import Settings, load_settings

SETTINGS = Settings()


def test_the_command_serves_fp32_with_runtime_lora_and_named_adapters() -> None:
    cmd = vllm_command(Path("/py"), Path("/models/m"), "m", {"mf-L0@v1": Path("/a/L0"), "mf-L1@v1": Path("/a/L1")},
                       host="127.0.0.1", port=8123)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in ("--model /models/m", "--served-model-name m", "--port 8123", "--dtype float32", "--enable-lora",
                 "--max-loras 4", "--max-lora-rank 8", "--lora-modules mf-L0@v1=/a/L0 mf-L1@v1=/a/L1"):
        assert part in joined
    assert vllm_env({})["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    bf16 = vllm_command(Path("/py"), Path("/models/m"), "m", {}, host="127.0.0.1", port=8123, dtype="bfloat16")
    assert "--dtype bfloat16" in " ".join(bf16)


def test_the_engine_dtype_is_read_from_the_environment_and_checked() -> None:
    assert load_settings({}).engine_dtype == "float32"
    assert load_settings({"MINDFORGE_ENGINE_DTYPE": "bfloat16"}).engine_dtype == "bfloat16"
    with pytest.raises(InputError, match="MINDFORGE_ENGINE_DTYPE: Input should be 'float32' or 'bfloat16'"):
        load_settings({"MINDFORGE_ENGINE_DTYPE": "float16"})


def test_a_missing_vllm_names_the_setup_command(monkeypatch) -> None:
    monkeypatch.setenv("MINDFORGE_VLLM_PYTHON", "/nonexistent/python")
    settings = load_settings()  # the variable is read where settings are loaded, nowhere else
    assert settings.vllm_python == Path("/nonexistent/python")
    with pytest.raises(VllmMissing, match=r"make setup VLLM=1"):
        vllm_python(settings)
    with pytest.raises(VllmMissing, match=r"make setup VLLM=1"):
        EngineProcess("smollm2-135m-instruct", backend="vllm", settings=settings).start()


def test_the_launcher_runs_either_backend_through_engine_serve(tmp_path) -> None:
    embedded = EngineProcess("smollm2-135m-instruct", settings=SETTINGS).command(tmp_path / "port")
    vllm = EngineProcess("smollm2-135m-instruct", backend="vllm", settings=SETTINGS).command(tmp_path / "port")
    assert "--backend" not in embedded and vllm[vllm.index("--backend") + 1] == "vllm"
    assert EngineProcess("m", backend="vllm", settings=SETTINGS).startup_timeout_s > EngineProcess("m", settings=SETTINGS).startup_timeout_s
    with pytest.raises(ValueError, match="backend"):
        EngineProcess("m", backend="sglang", settings=SETTINGS)  # type: ignore[arg-type]
