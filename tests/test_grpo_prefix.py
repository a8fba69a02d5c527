"""The resident-prefix step equals the naive step; GRPOTrainer.step on a real peft policy.

Equality is checked as the loss and, for every LoRA parameter, the relative
difference of the gradient tensors, ``|g_prefix - g_naive| / |g_naive|``
(Frobenius norms), within 1e-5. A fast variant runs on a tiny random Llama;
the other on the real default model through ``update.policy.load_policy``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mindforge.tasks.models import Hop, Trajectory
from mindforge.update.policy import PARENT_ADAPTER, TRAIN_ADAPTER, load_policy
from mindforge.update.samples import SampleSpec, Sampling, build_samples
from mindforge.update.trainer import GRPOConfig, GRPOTrainer

REL = 1e-5


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory) -> tuple[Path, Path]:
    from engine_tiny import make_adapter, make_model

    root = tmp_path_factory.mktemp("grpo-tiny")
    model = make_model(root / "model")
    return model, make_adapter(model, root / "adapter", seed=3)


def _groups(vocab: int, prompt_len: int, group_size: int, comp_lens: list[int], seed: int = 0,
            tool_turn: bool = False) -> list[list[Trajectory]]:
    """Two tasks' groups; hops carry engine-like logprobs (rewards vary so no group is skipped)."""
    g = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    groups = []
    for task in range(2):
        prompt = ids(prompt_len)
        group = []
        for i in range(group_size):
            comp = ids(comp_lens[i % len(comp_lens)])
            lp = (-torch.rand(len(comp), generator=g) * 3).tolist()
            hops = [Hop(kind="answer", route="L2", adapter="a", prompt_ids=tuple(prompt), completion_ids=tuple(comp),
                        logprobs=tuple(lp))]
            if tool_turn and i % 2 == 0:  # a tool result, then a second answer hop chaining onto the first
                prompt2 = prompt + comp + ids(5)
                comp2 = ids(4)
                hops.append(Hop(kind="answer", route="L2", adapter="a", prompt_ids=tuple(prompt2),
                                completion_ids=tuple(comp2), logprobs=tuple([-1.0] * 4)))
            group.append(Trajectory(task_id=f"t{task}", hcp_version="h", route="L2", sample=i, seed=i,
                                    hops=tuple(hops), reward=float((i + task) % 3) / 2))
        groups.append(group)
    return groups


def _grads(trainer: GRPOTrainer, samples, resident: bool) -> tuple[float, dict[str, torch.Tensor]]:
    trainer.optimizer.zero_grad(set_to_none=True)
    loss = trainer.loss_and_grads(samples, resident=resident)
    return loss, {n: p.grad.detach().clone() for n, p in trainer.policy.named_parameters() if p.grad is not None}


def _assert_same(trainer: GRPOTrainer, samples) -> None:
    loss_n, g_n = _grads(trainer, samples, resident=False)
    loss_p, g_p = _grads(trainer, samples, resident=True)
    assert abs(loss_p - loss_n) <= REL * abs(loss_n)
    lora = [n for n, p in trainer.policy.named_parameters() if p.requires_grad]
    assert set(g_n) == set(g_p) == set(lora) and lora
    worst = max(float((g_p[n] - g_n[n]).norm() / g_n[n].norm()) for n in lora)
    assert worst <= REL, worst
    assert all(float(g_n[n].norm()) > 0 for n in lora)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_resident_prefix_equals_naive_tiny(tiny_adapter, loss_type):
    model, adapter = tiny_adapter
    policy = load_policy(model, adapter)
    trainer = GRPOTrainer(policy, GRPOConfig(loss_type=loss_type, beta=0.05, temperature=0.7, top_p=0.9,
                                             max_completion_length=32, logit_chunk=7))
    groups = _groups(policy.config.vocab_size, 40, 4, [6, 9, 3, 12], tool_turn=True)
    samples = build_samples(groups, trainer.spec).samples
    _assert_same(trainer, samples)


def test_resident_prefix_equals_naive_default_model(tmp_path):
    """In float64, so the check is of the method, not of fp32 summation order.

    In fp32 the two paths add in different orders (other matmul shapes and
    attention kernels) and, on this test's random ids, differ by 6e-6 over
    the whole gradient and up to 1.3e-5 on the smallest per-tensor
    gradients; a wrong position or a gradient lost in the expanded cache
    would differ by orders of magnitude more.
    """
    from mindforge.engine.registry import init_adapters, resolve_model
    from mindforge.settings import load_settings

    model = resolve_model("smollm2-135m-instruct", load_settings())
    adapter = init_adapters(model, tmp_path, routes=("L2",))["L2"]
    policy = load_policy(model, adapter).double()
    with torch.no_grad():  # fresh adapters have B = 0, where A gets no gradient: give B some weight
        gen = torch.Generator().manual_seed(0)
        for n, p in policy.named_parameters():
            if "lora_B" in n and TRAIN_ADAPTER in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    trainer = GRPOTrainer(policy, GRPOConfig(loss_type="grpo", temperature=0.8, logit_chunk=64))
    groups = _groups(policy.config.vocab_size, 64, 4, [8, 12, 5, 10], tool_turn=True)[:1]
    samples = build_samples(groups, trainer.spec).samples
    _assert_same(trainer, samples)


def test_step_updates_only_the_policy_adapter_and_is_reproducible(tiny_adapter):
    model, adapter = tiny_adapter
    groups = _groups(200, 24, 4, [5, 8])
    out = []
    for _ in range(2):
        policy = load_policy(model, adapter, seed=0)
        before = {n: p.detach().clone() for n, p in policy.named_parameters()}
        trainer = GRPOTrainer(policy, GRPOConfig(lr=1e-2, beta=0.1, seed=0))
        m = trainer.step(groups)
        after = dict(policy.named_parameters())
        changed = {n for n in before if not torch.equal(before[n], after[n])}
        assert changed and all("lora_" in n and f".{TRAIN_ADAPTER}." in n for n in changed)
        assert not any(f".{PARENT_ADAPTER}." in n for n in changed)
        out.append((m, {n: after[n].detach().clone() for n in changed}))
        assert m["updated"] and m["groups"] == 2 and m["skipped_groups"] == 0 and m["resident_groups"] == 2
        assert m["tokens"] == 2 * (5 + 8 + 5 + 8) and m["kl"] >= 0 and 0 <= m["clip_fraction"] <= 1
    (m1, w1), (m2, w2) = out
    assert m1["loss"] == m2["loss"] and all(torch.equal(w1[n], w2[n]) for n in w1)


def test_steps_raise_the_likelihood_of_rewarded_completions(tiny_adapter):
    model, adapter = tiny_adapter
    policy = load_policy(model, adapter)
    good, bad = [10, 11, 12, 13], [20, 21, 22, 23]
    prompt = tuple(range(30, 50))

    def logp(ids: list[int]) -> float:
        with torch.no_grad():
            x = torch.tensor([list(prompt) + ids])
            lp = torch.log_softmax(policy(x).logits[0, len(prompt) - 1 : -1], -1)
            return float(lp.gather(1, torch.tensor(ids)[:, None]).sum())

    def group() -> list[Trajectory]:
        out = []
        for i, (ids, r) in enumerate([(good, 1.0), (bad, 0.0)] * 2):
            with torch.no_grad():
                x = torch.tensor([list(prompt) + ids])
                lp = torch.log_softmax(policy(x).logits[0, len(prompt) - 1 : -1], -1)
                per = lp.gather(1, torch.tensor(ids)[:, None]).squeeze(1).tolist()
            hop = Hop(kind="answer", route="L2", adapter="a", prompt_ids=prompt, completion_ids=tuple(ids),
                      logprobs=tuple(per))
            out.append(Trajectory(task_id="t", hcp_version="h", route="L2", sample=i, hops=(hop,), reward=r))
        return out

    gap0 = logp(good) - logp(bad)
    trainer = GRPOTrainer(policy, GRPOConfig(lr=5e-3, min_prefix_tokens=4))
    for _ in range(5):
        m = trainer.step([group()])
        assert m["clip_fraction"] <= 1.0
    assert logp(good) - logp(bad) > gap0 + 1.0


def test_no_signal_means_no_update(tiny_adapter):
    model, adapter = tiny_adapter
    policy = load_policy(model, adapter)
    groups = _groups(200, 24, 4, [5])
    flat = [[t.model_copy(update={"reward": 1.0}) for t in g] for g in groups]
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    m = GRPOTrainer(policy, GRPOConfig()).step(flat)
    assert m["skipped_groups"] == 2 and not m["updated"] and m["tokens"] == 0
    assert all(torch.equal(before[n], p) for n, p in policy.named_parameters())


def test_trainer_scores_under_the_engine_sampling_distribution(tiny_adapter):
    """Fed the trainer's own logprobs under (T, top_p) as the engine's, every ratio is 1."""
    from mindforge.engine.sampling import SamplingParams, sampling_logprobs
    from mindforge.update.logprobs import Parts, Targets, naive_logprobs

    model, adapter = tiny_adapter
    policy = load_policy(model, adapter).eval()
    prompt, comp = list(range(40, 60)), [70, 71, 72, 73, 74]
    with torch.no_grad():
        logits = policy(torch.tensor([prompt + comp])).logits[0, len(prompt) - 1 : -1]
    params = SamplingParams(temperature=0.7, top_p=0.8)
    # keep only tokens inside the engine's nucleus: the engine would never sample the others
    engine_lp = [float(sampling_logprobs(logits[i], params)[t]) for i, t in enumerate(comp)]
    hop = Hop(kind="answer", route="L2", adapter="a", prompt_ids=tuple(prompt), completion_ids=tuple(comp),
              logprobs=tuple(x if x > -1e30 else -50.0 for x in engine_lp))
    spec = SampleSpec(route="L2", answer_sampling=Sampling(0.7, 0.8), scale_rewards=False)
    trajs = [Trajectory(task_id="t", hcp_version="h", route="L2", sample=i, hops=(hop,), reward=float(i))
             for i in range(2)]
    sample = build_samples([trajs], spec).samples[:1]
    targets = Targets.of(sample)
    with torch.no_grad():
        ours = naive_logprobs(Parts.of(policy), sample, targets).tolist()
    inside = [i for i, x in enumerate(engine_lp) if x > -1e30]
    assert [ours[i] for i in inside] == pytest.approx([engine_lp[i] for i in inside], abs=1e-5)


def test_resident_prefix_with_suffix_micro_batches_equals_naive(tiny_adapter):
    """One prefix forward, the suffixes three at a time: the same loss and gradients, KL included."""
    model, adapter = tiny_adapter
    policy = load_policy(model, adapter)
    trainer = GRPOTrainer(policy, GRPOConfig(loss_type="grpo", beta=0.05, suffix_batch_size=3, logit_chunk=5))
    groups = _groups(policy.config.vocab_size, 30, 7, [4, 9, 2], tool_turn=True)
    samples = [s for s in build_samples(groups, trainer.spec).samples if s.group == 0]
    _assert_same(trainer, samples)
    m = trainer.step(groups)
    assert m["updated"] and m["resident_groups"] == 2 and m["tokens"] == sum(s.active for s in
                                                                             build_samples(groups, trainer.spec).samples)
