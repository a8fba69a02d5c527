"""The engine's admin client: which adapters it serves, load and unload by name, a sampled probe, counters.

It speaks the vLLM-compatible contract (``GET /v1/models``,
``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``,
``POST /v1/completions`` with token ids), so it drives the embedded engine,
vLLM and SGLang alike. The run's services, Update's handoff and the
services catalog all use this one client.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from mindforge.errors import MindForgeError


class EngineError(MindForgeError):
    pass


_COUNTERS = {  # /metrics counter -> what it counts; the embedded engine's names, then vLLM's
    "mindforge_engine_generated_tokens_total": "generated_tokens",
    "mindforge_engine_prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generated_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
}
# Where the embedded engine's time went; vLLM exposes per-request latencies, not its busy time, so a
# vLLM reading has only the token counts.
_ENGINE_TIME = {
    "mindforge_engine_decode_steps_total": "decode_steps",
    "mindforge_engine_batch_size_sum": "decode_rows",  # rows over all steps: the tokens decode sampled
    "mindforge_engine_decode_seconds_total": "decode_seconds",
    "mindforge_engine_prefill_seconds_total": "prefill_seconds",
    "mindforge_engine_prefill_tokens_total": "prefill_tokens",
}


class EngineAdmin:
    """The few engine endpoints a handoff needs (the vLLM-compatible contract)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 300.0,
                 transport: httpx.BaseTransport | None = None, declared_dtype: str | None = None):
        self.declared_dtype = declared_dtype  # what the user says an engine that reports none computes in
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s,
                                 transport=transport)

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        try:
            return self.http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EngineError(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from exc

    def served(self) -> dict[str, str]:
        """Adapter name -> the folder the engine loaded it from (models that name a parent)."""
        try:
            data = self.http.get("/v1/models").json().get("data", [])
        except (httpx.HTTPError, ValueError) as exc:
            raise EngineError(f"{self.base_url}/v1/models: {exc}") from exc
        return {m["id"]: str(m.get("root") or "") for m in data if m.get("parent")}

    def loaded(self) -> list[str]:
        """Adapter names the engine serves."""
        return list(self.served())

    def kind(self) -> str:
        """Which engine answers: ``embedded`` (this package's), ``vllm``, or what its models say they are."""
        try:
            data = self.http.get("/v1/models").json().get("data", [])
        except (httpx.HTTPError, ValueError) as exc:
            raise EngineError(f"{self.base_url}/v1/models: {exc}") from exc
        owner = str(data[0].get("owned_by", "unknown")) if data else "unknown"
        return "embedded" if owner == "mindforge" else owner

    def dtype(self) -> str | None:
        """The dtype the engine computes in: as its ``/health`` says (the embedded engine), else as declared
        (vLLM and SGLang say nothing; ``settings.engine_dtype``), else None."""
        try:
            body = self.http.get("/health", timeout=10.0).json()
        except (httpx.HTTPError, ValueError):
            body = None
        value = body.get("dtype") if isinstance(body, dict) else None
        return str(value) if value else self.declared_dtype

    def generation_counters(self) -> dict[str, float] | None:
        """Tokens the engine generated and was prompted with since it started (``/metrics``), or None
        where it has no such counters. The embedded engine's and vLLM's names are both read; the
        embedded engine's also say how many decode steps it ran and how long it spent decoding and
        prefilling (``decode_steps``, ``decode_rows``, ``decode_seconds``, ``prefill_seconds``, ``prefill_tokens``)."""
        try:
            r = self.http.get("/metrics", timeout=10.0)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        totals = {"generated_tokens": 0.0, "prompt_tokens": 0.0}
        found = False
        for line in r.text.splitlines():
            if not line or line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            key = _COUNTERS.get(name)
            if key is not None:
                totals[key] += float(line.rsplit(" ", 1)[1])  # vLLM has one sample a label set: summed
                found = True
            elif name in _ENGINE_TIME:
                totals[_ENGINE_TIME[name]] = float(line.rsplit(" ", 1)[1])
        return totals if found else None

    def load(self, name: str, path: Path) -> None:
        r = self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        if r.status_code >= 400:
            raise EngineError(f"loading {name} from {path}: HTTP {r.status_code}: {r.text[:500]}")

    def unload(self, name: str) -> bool:
        """True when the engine had ``name`` and dropped it."""
        r = self._post("/v1/unload_lora_adapter", {"lora_name": name})
        return r.status_code < 400

    def sample(
        self, model: str, prompt_ids: Sequence[int], max_tokens: int, seed: int
    ) -> tuple[list[int], list[float]]:
        """Completion token ids and their logprobs under the model's own distribution."""
        body = {
            "model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens,
            "temperature": 1.0, "top_p": 1.0, "seed": seed, "logprobs": 1,
            "return_token_ids": True,
        }
        r = self._post("/v1/completions", body)
        if r.status_code >= 400:
            raise EngineError(f"completion on {model}: HTTP {r.status_code}: {r.text[:500]}")
        choice = r.json()["choices"][0]
        ids = choice.get("token_ids")
        lps = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or lps is None or len(ids) != len(lps):
            raise EngineError(f"{self.base_url} returned no token ids/logprobs (return_token_ids, logprobs)")
        return [int(i) for i in ids], [float(x) for x in lps]
