"""GRPO core: samples from the engine's ids, advantages, the three loss types, KL, skipped groups."""

from __future__ import annotations

import math

import pytest
import torch

from mindforge.tasks.models import Hop, Trajectory
from mindforge.update.loss import k3_kl, per_token_loss, token_weights
from mindforge.update.samples import (
    SampleError,
    SampleSpec,
    Sampling,
    advantages,
    build_samples,
    chain_hops,
)


def hop(kind, route, prompt, completion, logprobs=None, adapter="mf-L2-v0000"):
    lp = tuple(logprobs) if logprobs is not None else tuple(-0.5 - 0.1 * i for i in range(len(completion)))
    return Hop(kind=kind, route=route, adapter=adapter, prompt_ids=tuple(prompt), completion_ids=tuple(completion),
               logprobs=lp)


def traj(task, sample, reward, hops, route="L2"):
    return Trajectory(task_id=task, hcp_version="h", route=route, sample=sample, seed=sample, hops=tuple(hops),
                      reward=reward)


# --------------------------------------------------------------------------- samples
def test_tool_call_rollout_yields_the_engine_ids_and_completion_masks():
    # What the engine saw: hop 1 answers with a tool call (ending in the stop token 2); the
    # harness appends the tool result (ids 900..903) and the next assistant header (50, 51);
    # hop 2 answers. Route and summary hops belong to other adapters.
    route = hop("route", "L0", [1, 10, 11], [77, 2], adapter="mf-L0-v0000")
    first = hop("answer", "L2", [1, 10, 11, 12], [300, 301, 302, 2], [-0.1, -0.2, -0.3, -0.4])
    second_prompt = [1, 10, 11, 12, 300, 301, 302, 2, 900, 901, 902, 903, 50, 51]
    second = hop("answer", "L2", second_prompt, [400, 401, 2], [-1.0, -1.1, -1.2])
    summary = hop("summary", "L0", [5, 6], [7, 2], adapter="mf-L0-v0000")
    group = [traj("t", 0, 1.0, [route, first, second, summary]), traj("t", 1, 0.0, [route, first, second])]
    built = build_samples([group], SampleSpec(route="L2", scale_rewards=False))
    assert built.skipped_groups == 0 and len(built.samples) == 2
    s = built.samples[0]
    assert s.ids == tuple(second_prompt + [400, 401, 2])  # the engine's ids, nothing re-tokenized
    trained = [s.ids[i] for i, m in enumerate(s.mask) if m]
    assert trained == [300, 301, 302, 2, 400, 401, 2]  # both completions, stop tokens included
    assert [i for i, m in enumerate(s.mask) if m] == [4, 5, 6, 7, 14, 15, 16]  # tool result, prompt masked
    assert [s.old_logprobs[i] for i, m in enumerate(s.mask) if m] == [-0.1, -0.2, -0.3, -0.4, -1.0, -1.1, -1.2]
    assert s.advantage == pytest.approx(0.5) and built.samples[1].advantage == pytest.approx(-0.5)
    assert s.kind == "answer" and s.route == "L2"


def test_hops_that_do_not_chain_stay_separate_samples():
    a = hop("answer", "L2", [1, 2, 3], [4, 5])
    b = hop("answer", "L2", [1, 2, 9, 4, 5, 6], [7])  # the harness re-rendered: prompt does not extend a
    out = chain_hops([a, b])
    assert [ids for ids, _, _ in out] == [(1, 2, 3, 4, 5), (1, 2, 9, 4, 5, 6, 7)]
    assert out[1][1] == (False,) * 6 + (True,)


def test_router_hops_train_l0_only_when_asked_with_family_reward():
    r = hop("route", "L0", [1, 2, 3], [40, 2], [-0.1, -0.2], adapter="mf-L0-v0000")
    ans = hop("answer", "L1", [1, 2, 3, 5], [6, 2])
    group = [traj("t", 0, 1.0, [r, ans], route="L1"), traj("t", 1, 1.0, [r, ans], route="L2")]
    fam = {"t": "L1"}
    assert build_samples([group], SampleSpec(route="L0"), fam).samples == []  # router training off
    built = build_samples([group], SampleSpec(route="L0", train_router=True, scale_rewards=False,
                                              route_sampling=Sampling(0.0, 0.5)), fam)
    assert [(s.kind, s.route, s.advantage) for s in built.samples] == [("route", "L0", 0.5), ("route", "L0", -0.5)]
    assert built.samples[0].temperature == 1.0 and built.samples[0].top_p == 1.0  # greedy: engine reports T=1


def test_groups_without_signal_are_skipped():
    h = hop("answer", "L2", [1, 2], [3])
    same = [traj("a", i, 1.0, [h]) for i in range(3)]
    varied = [traj("b", i, float(i), [h]) for i in range(3)]
    built = build_samples([same, varied], SampleSpec(route="L2"))
    assert built.groups == 2 and built.skipped_groups == 1
    assert {s.group for s in built.samples} == {1}


def test_advantages_centre_and_scale_like_trl():
    assert advantages([1.0, 1.0], True) is None
    assert advantages([0.0, 1.0, 1.0, 0.0], False) == [-0.5, 0.5, 0.5, -0.5]
    std = math.sqrt(sum((x - 0.5) ** 2 for x in [0, 1, 1, 0]) / 3)
    got = advantages([0.0, 1.0, 1.0, 0.0], True)
    assert got == pytest.approx([x / (std + 1e-4) for x in [-0.5, 0.5, 0.5, -0.5]])


def test_bad_hops_are_named():
    with pytest.raises(SampleError, match="2 completion ids but 1 logprobs"):
        chain_hops([hop("answer", "L2", [1], [2, 3], [-0.1])])
    with pytest.raises(SampleError, match="no prompt ids"):
        chain_hops([Hop(kind="answer", route="L2", adapter="x", prompt_ids=(), completion_ids=(1,), logprobs=(-1.0,))])


# --------------------------------------------------------------------------- loss types
def _hand_loss(loss_type: str) -> float:
    # Two sequences: 3 tokens with advantage +1, 1 token with advantage -1, ratio 1 (logp = old).
    # Per-token loss is -A: [-1, -1, -1] and [+1].
    if loss_type == "grpo":  # per-sequence mean, then mean over sequences
        return ((-3 / 3) + (1 / 1)) / 2
    if loss_type == "dr_grpo":  # sum / (sequences x max_completion_length=8)
        return (-3 + 1) / (2 * 8)
    return (-3 + 1) / 4  # dapo: sum / active tokens


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_loss_types_weigh_tokens_as_trl_defines_them(loss_type):
    w = token_weights([3, 1], loss_type, 8)
    weight_N = torch.tensor([w[0]] * 3 + [w[1]])
    logp_N = torch.tensor([-1.0, -2.0, -0.5, -0.7])
    adv_N = torch.tensor([1.0, 1.0, 1.0, -1.0])
    loss_N, stats = per_token_loss(logp_N, logp_N.clone(), adv_N, eps_low=0.2, eps_high=0.2)
    assert float((loss_N * weight_N).sum()) == pytest.approx(_hand_loss(loss_type))
    assert float(stats["clipped"].sum()) == 0


def test_loss_type_unknown_is_refused():
    with pytest.raises(ValueError, match="loss_type"):
        token_weights([1], "ppo", 8)  # type: ignore[arg-type]


def test_clipping_by_hand():
    old = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    new = torch.log(torch.tensor([0.75, 0.75, 0.3, 0.3]))  # ratios 1.5, 1.5, 0.6, 0.6
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss_N, stats = per_token_loss(new, old, adv, eps_low=0.2, eps_high=0.2)
    # A>0, r=1.5: min(1.5, 1.2) = 1.2 -> -1.2 (clipped); A<0, r=1.5: min(-1.5, -1.2) = -1.5 -> 1.5
    # A>0, r=0.6: min(0.6, 0.8) = 0.6 -> -0.6;             A<0, r=0.6: min(-0.6, -0.8) = -0.8 -> 0.8 (clipped)
    assert loss_N.tolist() == pytest.approx([-1.2, 1.5, -0.6, 0.8])
    assert stats["clipped"].tolist() == [1.0, 0.0, 0.0, 1.0]
    # gradients: clipped tokens carry none
    new = new.clone().requires_grad_(True)
    per_token_loss(new, old, adv, eps_low=0.2, eps_high=0.2)[0].sum().backward()
    assert new.grad[0] == 0 and new.grad[3] == 0 and new.grad[1] != 0


def test_kl_term_is_k3_by_hand():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -2.0])
    kl = k3_kl(logp, ref)
    assert kl.tolist() == pytest.approx([math.exp(-0.5) + 0.5 - 1.0, 0.0])
    adv = torch.zeros(2)
    loss_N, stats = per_token_loss(logp, logp, adv, eps_low=0.2, eps_high=0.2, beta=0.1, ref_logp_N=ref)
    assert loss_N.tolist() == pytest.approx((0.1 * kl).tolist())
    assert stats["kl"].tolist() == pytest.approx(kl.tolist())
    with pytest.raises(ValueError, match="reference"):
        per_token_loss(logp, logp, adv, eps_low=0.2, eps_high=0.2, beta=0.1)
