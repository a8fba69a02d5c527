"""Settings, read once at start-up by ``load_settings()``; never at import time.

Each field has an environment variable ``MINDFORGE_<FIELD>``. Library code
takes a ``Settings`` (or the one value it needs) as an argument; only entry
points (CLI, flows, scripts) call ``load_settings()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

EngineBackend = Literal["embedded", "vllm"]
EngineDtype = Literal["float32", "bfloat16"]
ENGINE_BACKENDS: tuple[str, ...] = ("embedded", "vllm")
ENGINE_DTYPES: tuple[str, ...] = ("float32", "bfloat16")
# The embedded engine's most sequences in one decode step. Measured on the default model (2 cores), the
# sealed eval's first 160 tasks with 64 requests in flight: scored in 350 s at 32, 279 s at 64 (a step of 26 rows
# costs less than one of 22 that new requests queue behind). 64 rows of ~1k tokens hold ~3 GB of fp32 keys/values.
ENGINE_MAX_BATCH = 64


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mindforge"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    # Read from the environment only when a Settings is made (load_settings), never at import.
    cache_dir: Path = Field(default_factory=lambda: default_cache_dir(os.environ))
    # sandbox
    docker_host: str | None = None  # None: the docker SDK's own default (DOCKER_HOST or the socket)
    sandbox_pool_size: int = 2
    # serving
    engine_url: str | None = None  # an engine already running; None: start one (engine_backend)
    # The engine a run starts when none runs: this package's (embedded) or vLLM (.venv-vllm). None: the
    # embedded one, and a running local engine of either kind is reused; named, only that kind is.
    engine_backend: EngineBackend | None = None
    # The weights' and activations' dtype of an engine a run starts (vLLM's too), and of an engine it is
    # pointed at that does not report one (vLLM, SGLang). float32 is the trainer's: engine and
    # trainer logprobs agree to ~1e-5 (the hand-off probe checks 1e-3). bfloat16 gave the default model
    # 1.35-1.5x the tokens/s at 8-64 concurrent requests on AVX512-BF16 cores and moves token logprobs by
    # up to ~0.1, so its probe catches wrong weights, not a small update (README, "Engine dtype").
    engine_dtype: EngineDtype = "float32"
    api_key: str | None = None
    model: str = "smollm2-135m-instruct"
    vllm_python: Path | None = None  # the python of a vLLM environment; None: a source checkout's .venv-vllm
    # local services (`mindforge up`)
    host: str = "127.0.0.1"
    prefect_port: int = 4200
    engine_port: int = 8400
    proxy_port: int = 8401

    def with_engine(self, backend: str | None) -> Settings:
        """These settings with ``engine_backend`` set (None keeps them as they are)."""
        return self if backend is None else Settings.model_validate({**self.model_dump(), "engine_backend": backend})

    @property
    def models_dir(self) -> Path:
        return self.cache_dir / "models"

    @property
    def services_dir(self) -> Path:
        return self.cache_dir / "services"

    @property
    def prefect_api_url(self) -> str:
        return f"http://{self.host}:{self.prefect_port}/api"

    @property
    def local_engine_url(self) -> str:
        return f"http://{self.host}:{self.engine_port}"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, object] = {"cache_dir": default_cache_dir(env)}
    for name in Settings.model_fields:
        key = f"MINDFORGE_{name.upper()}"
        if key in env:
            values[name] = env[key]
    try:
        return Settings(**values)
    except ValidationError as exc:  # name the variable that holds the bad value, not the field
        from mindforge.errors import InputError, pydantic_problems

        loc, problem = pydantic_problems(exc)[0]
        name = loc.strip("/").split("/")[0]
        raise InputError("environment", f"MINDFORGE_{name.upper()}", f"{problem} (got {env.get(f'MINDFORGE_{name.upper()}')!r})") from None
