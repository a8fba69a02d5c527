"""The run's services around an engine (a stand-in over httpx.MockTransport): which one is reused, what is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mindforge.engine.admin import EngineAdmin
from mindforge.run_services import ServicesError, load_missing


class Engine:
    """/v1/models with each adapter's folder as its root (as vLLM and the embedded engine report it)."""

    def __init__(self, owner: str = "vllm", served: dict[str, Path] | None = None):
        self.owner, self.served, self.loads = owner, dict(served or {}), []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            data = [{"id": "base", "owned_by": self.owner, "parent": None}]
            data += [{"id": n, "owned_by": self.owner, "root": str(p), "parent": "base"} for n, p in self.served.items()]
            return httpx.Response(200, json={"data": data})
        if request.url.path == "/v1/load_lora_adapter":
            body = json.loads(request.content)
            self.loads.append(body["lora_name"])
            self.served[body["lora_name"]] = Path(body["lora_path"])
            return httpx.Response(200, json={})
        return httpx.Response(404)


def admin(engine: Engine) -> EngineAdmin:
    return EngineAdmin("http://engine", transport=httpx.MockTransport(engine.handle))


def adapter(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


def test_the_engine_says_which_kind_it_is() -> None:
    assert admin(Engine("vllm")).kind() == "vllm"
    assert admin(Engine("mindforge")).kind() == "embedded"  # this package's engine
    assert admin(Engine("sglang")).kind() == "sglang"


def test_missing_adapters_are_loaded_and_equal_ones_reused(tmp_path: Path) -> None:
    ours = adapter(tmp_path / "run" / "L0", b"zeros")
    same_elsewhere = adapter(tmp_path / "services" / "L0", b"zeros")  # `mindforge up`'s catalog: same weights
    mine = adapter(tmp_path / "run" / "L2", b"two")
    engine = Engine(served={"mf-L0-v0000": same_elsewhere})
    load_missing(admin(engine), {"mf-L0-v0000": ours, "mf-L2-v0000": mine}, lambda m: None)
    assert engine.loads == ["mf-L2-v0000"]


def test_a_name_served_with_other_weights_is_refused(tmp_path: Path) -> None:
    """Two runs on one engine, each with its own mf-L2-v0001: the second must not be answered by the first's."""
    theirs = adapter(tmp_path / "a" / "v1", b"run a trained this")
    ours = adapter(tmp_path / "b" / "v1", b"run b trained that")
    engine = Engine(served={"mf-L2-v0001": theirs})
    with pytest.raises(ServicesError, match=r"serves mf-L2-v0001 from .*/a/v1, whose weights differ"):
        load_missing(admin(engine), {"mf-L2-v0001": ours}, lambda m: None)
    assert engine.loads == []


def test_a_local_engine_of_another_kind_is_not_reused_when_a_kind_is_named(monkeypatch) -> None:
    from types import SimpleNamespace

    from mindforge import run_services
    from mindforge.settings import Settings

    monkeypatch.setattr(run_services, "healthy", lambda url: True)  # `mindforge up` left an embedded engine
    monkeypatch.setattr(run_services, "EngineAdmin", lambda url, **kw: SimpleNamespace(
        kind=lambda: admin(Engine("mindforge")).kind(), close=lambda: None))
    local = Settings().local_engine_url
    assert run_services.running_engine(Settings()) == local  # no kind named: whichever runs
    assert run_services.running_engine(Settings(engine_backend="embedded")) == local
    with pytest.raises(ServicesError, match=r"asks for the vllm engine, but the embedded engine answers .*"
                                            r"mindforge down --only engine"):
        run_services.running_engine(Settings(engine_backend="vllm"))
    # an engine the user configured is used whatever it is (vLLM or SGLang on GPUs)
    assert run_services.running_engine(Settings(engine_backend="vllm", engine_url="http://gpu:8000/")) == "http://gpu:8000"


def test_mindforge_up_starts_the_engine_the_settings_name() -> None:
    from mindforge.cycle.local import engine_spec
    from mindforge.settings import Settings

    embedded = engine_spec(Settings(), {"mf-L0-v0000": Path("/a/L0")})
    assert "--backend" not in embedded.argv and embedded.start_timeout_s == 300.0
    vllm = engine_spec(Settings(engine_backend="vllm"), {"mf-L0-v0000": Path("/a/L0")})
    assert vllm.argv[-2:] == ("--backend", "vllm") and "mf-L0-v0000=/a/L0" in vllm.argv
    assert vllm.start_timeout_s == 900.0  # vLLM takes minutes to start on two busy cores
    assert Settings().with_engine(None) == Settings() and Settings().with_engine("vllm").engine_backend == "vllm"
    with pytest.raises(ValueError, match="engine_backend"):
        Settings().with_engine("sglang")


@pytest.mark.parametrize(("text", "expected"), [
    ("# HELP x\nmindforge_engine_generated_tokens_total 120\nmindforge_engine_prompt_tokens_total 900\n"
     "mindforge_engine_decode_steps_total 7\nmindforge_engine_batch_size_sum 40\n",
     {"generated_tokens": 120.0, "prompt_tokens": 900.0, "decode_steps": 7.0, "decode_rows": 40.0}),
    ('vllm:generation_tokens_total{engine="0",model_name="m"} 50.0\n'  # vLLM: one sample a label set
     'vllm:generation_tokens_total{engine="1",model_name="m"} 25.0\n'
     'vllm:prompt_tokens_total{engine="0",model_name="m"} 400.0\n', {"generated_tokens": 75.0, "prompt_tokens": 400.0}),
    ("other_counter_total 3\n", None),
])
def test_generation_counters_read_either_engines_metrics(text: str, expected) -> None:
    engine = EngineAdmin("http://engine", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, text=text) if r.url.path == "/metrics" else httpx.Response(404)))
    assert engine.generation_counters() == expected
    absent = EngineAdmin("http://engine", transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    assert absent.generation_counters() is None
