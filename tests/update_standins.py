"""Stand-ins around the Update stage for its unit tests: an engine over httpx.MockTransport, verdicts, a trainer.

The stand-in engine serves adapters the way an engine does: it loads the peft
folder named in ``/v1/load_lora_adapter`` into its own copy of the base model
and samples with a KV cache from a generator seeded by the request's ``seed``,
reporting each token's logprob. So its samples depend only on the weights it
serves and the seed, as a real engine's do (tests/test_update_stage.py runs one).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from mindforge.engine.admin import EngineAdmin
from mindforge.rollouts import TurnOutcome
from mindforge.tasks.models import Hop, Verdict, VerdictStatus
from mindforge.tasks.models import TestOutcome as Outcome
from mindforge.tasks.models import TestResult as Result
from mindforge.update.policy import load_policy


def tiny_base(path: Path) -> Path:
    """A tiny random Llama saved to ``path``: the base model of these tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


class StandInEngine:
    def __init__(self, base_path: Path):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.base = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32)
        self.model = None
        self.loaded: list[str] = []
        self.calls: list[str] = []
        self.dtype: str | None = None  # what /health reports; None: no /health (as vLLM's says nothing)
        self.logprob_shift = 0.0  # added to every reported logprob: stands in for bf16 rounding

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/models":
            data = [{"id": "base", "parent": None}] + [{"id": n, "parent": "base"} for n in self.loaded]
            return httpx.Response(200, json={"data": data})
        if path == "/v1/load_lora_adapter":
            try:
                self._load(body["lora_name"], body["lora_path"])
            except (ValueError, OSError) as exc:  # an engine answers 400, it does not crash
                return httpx.Response(400, json={"error": str(exc)})
            return httpx.Response(200, json={})
        if path == "/v1/unload_lora_adapter":
            if body["lora_name"] not in self.loaded:
                return httpx.Response(404, json={"error": "not loaded"})
            self.model.delete_adapter(body["lora_name"])
            self.loaded.remove(body["lora_name"])
            return httpx.Response(200, json={})
        if path == "/v1/completions":
            return httpx.Response(200, json=self._complete(body))
        if path == "/health" and self.dtype is not None:
            return httpx.Response(200, json={"status": "ok", "dtype": self.dtype})
        return httpx.Response(404)

    def _load(self, name: str, folder: str) -> None:
        from peft import PeftModel

        if self.model is None:
            self.model = PeftModel.from_pretrained(self.base, folder, adapter_name=name)
        else:
            self.model.load_adapter(folder, adapter_name=name)
        self.loaded.append(name)

    def _complete(self, body: dict) -> dict:
        torch = self.torch
        self.model.set_adapter(body["model"])
        gen = torch.Generator().manual_seed(body["seed"])
        ids, lps = [], []
        with torch.no_grad():
            out = self.model(torch.tensor([body["prompt"]]), use_cache=True)
            for _ in range(body["max_tokens"]):
                logp = torch.log_softmax(out.logits[0, -1].float(), -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                ids.append(tok)
                lps.append(float(logp[tok]) + self.logprob_shift)
                out = self.model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
        return {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": lps}}]}


TOKENS = 6


def prompt_ids(task) -> list[int]:
    return [1 + (ord(c) % 90) for c in task.prompt[:12]]


class LowTokenVerifier:
    """Stand-in verdicts: one checker test a completion token, passed by ids below 48."""

    def verify_many(self, jobs):
        out = []
        for task, candidate in jobs:
            ids = [int(x) for x in candidate.split()]
            tests = tuple(Result(name=f"t{i}", outcome=Outcome.PASS if x < 48 else Outcome.FAIL)
                          for i, x in enumerate(ids))
            status = VerdictStatus.PASS if all(x < 48 for x in ids) else VerdictStatus.FAIL
            out.append(Verdict(task_id=task.id, status=status, tests=tests))
        return out


class PolicyGradient:
    """Stand-in trainer: group-centred REINFORCE on the answer hops (helper-7's GRPO is the real one)."""

    def __init__(self, policy, fields):
        import torch

        self.torch, self.policy = torch, policy
        self.opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=fields.get("lr", 0.05))

    def step(self, groups, families=None):
        torch = self.torch
        loss = torch.zeros(())
        tokens = 0
        for g in groups:
            mean = sum(t.reward for t in g) / len(g)
            for t in g:
                hop = t.hops[0]
                ids = torch.tensor([list(hop.prompt_ids) + list(hop.completion_ids)])
                n = len(hop.completion_ids)
                logits = self.policy(ids, logits_to_keep=n + 1).logits[0, :n]
                logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(hop.completion_ids)[:, None]).sum()
                loss = loss - (t.reward - mean) * logp
                tokens += n
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return {"loss": float(loss.detach()), "kl": 0.0, "clip_fraction": 0.0, "tokens": tokens}

    def state_dict(self):
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state):
        self.opt.load_state_dict(state["optimizer"])


def services(catalog, engine, base_path, doc, make_trainer=None, progress=None):
    """The stage's services over the stand-ins; ``make_trainer`` None: the stand-in PolicyGradient."""
    from mindforge.update.stage import UpdateServices

    def runner_for(hcp_doc, max_tokens, route=None):
        assert route == "L2"  # the trained specialist answers every rollout
        name = hcp_doc["router"]["routes"]["L2"]["served_adapter"]

        async def run(task, seed, tools):
            prompt = prompt_ids(task)
            ids, lps = engine.sample(name, prompt, TOKENS, seed)
            hop = Hop(kind="answer", route="L2", adapter=name, prompt_ids=tuple(prompt),
                      completion_ids=tuple(ids), logprobs=tuple(lps))
            return TurnOutcome(answer=" ".join(map(str, ids)), hops=[hop], route="L2")

        return run

    return UpdateServices(
        engine=engine, verifier=LowTokenVerifier(), runner_for=runner_for, open_session=None,
        catalog=catalog, load_policy=lambda entry: load_policy(base_path, entry.path),
        make_trainer=make_trainer or PolicyGradient, render_probe=lambda d, route, task: prompt_ids(task),
        base_model=str(base_path), hcp_doc=doc, progress=progress,
    )


def grpo_trainer(policy, fields):
    from mindforge.update.trainer import GRPOConfig, GRPOTrainer

    return GRPOTrainer(policy, GRPOConfig(**fields))


def fresh_adapter(base_path: Path, folder: Path) -> Path:
    """A fresh LoRA adapter of the tiny base, written as a peft folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mindforge.catalog import write_peft_adapter

    torch.manual_seed(2)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base_path)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]), adapter_name="fresh")
    folder.mkdir(parents=True, exist_ok=True)
    write_peft_adapter(model, "fresh")(folder)
    return folder


def tiny_update(run_dir: Path, base_path: Path, adapter: Path, progress=None, **fields):
    """One Update with the real GRPO trainer on the tiny base, in a run directory that starts (or resumed
    finds) version 0 of L2 copied from ``adapter``. Each call starts a fresh stand-in engine, as a rerun
    after a kill would find one."""
    from mindforge.catalog import AdapterCatalog, copy_adapter
    from mindforge.hcp import read_json
    from mindforge.paths import default_hcp_path
    from mindforge.update.stage import UpdateConfig, run_update

    catalog = AdapterCatalog(Path(run_dir) / "adapters")
    v0 = catalog.find("mf-L2-v0000") or catalog.save("L2", copy_adapter(adapter), prefix="mf-L2")
    engine = EngineAdmin("http://engine", transport=httpx.MockTransport(StandInEngine(base_path).handle))
    engine.load(v0.name, v0.path)
    config = UpdateConfig(**{
        "run_dir": run_dir, "cycle": 1, "steps": 3, "group_size": 2, "batch_tasks": 2, "reward": "pass_fraction",
        "validation_tasks": 1, "validation_samples": 1, "probe_prompts": 1, "validate_after": False,
        "grpo": {"lr": 0.05}, "rft": {"enabled": False}, **fields})
    svc = services(catalog, engine, base_path, read_json(default_hcp_path()), grpo_trainer, progress)
    return run_update(config, svc)
