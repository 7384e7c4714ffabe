"""GRPO loss pieces against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from venus_core.rl.losses import (
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    k3_kl,
    masked_mean,
    token_entropy,
    token_logprobs,
)


def test_group_advantages_normalise_and_flag_zero_variance() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    adv, zero = group_advantages(rewards, eps=1e-6)
    # row 0: mean 0.5, population std 0.5 -> +-0.5 / (0.5 + 1e-6)
    a = 0.5 / (0.5 + 1e-6)
    assert torch.allclose(adv[0], torch.tensor([a, -a, -a, a]))
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    # row 2: mean 0.25, std sqrt(0.1875)
    s = math.sqrt(0.1875)
    assert torch.allclose(adv[2], torch.tensor([0.75 / (s + 1e-6)] + [-0.25 / (s + 1e-6)] * 3))
    assert zero.tolist() == [False, True, False]


def test_group_advantages_reject_bad_shapes() -> None:
    with pytest.raises(ValueError, match="group>=2"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="group>=2"):
        group_advantages(torch.zeros(3, 1))


def test_clipped_surrogate_hand_values() -> None:
    # ratios 1.5, 1.5, 0.5, 0.5 with advantages +1, -1, -1, +1 and eps 0.2
    logp = torch.log(torch.tensor([[1.5], [1.5], [0.5], [0.5]]))
    old = torch.zeros(4, 1)
    loss, active = clipped_surrogate(logp, old, torch.tensor([1.0, -1.0, -1.0, 1.0]), 0.2)
    assert torch.allclose(loss.squeeze(1), torch.tensor([-1.2, 1.5, 0.8, -0.5]))
    assert active.squeeze(1).tolist() == [True, False, True, False]


def test_k3_kl_hand_values() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.3]]))
    kl = k3_kl(logp, ref)
    assert kl[0, 0].item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)
    assert (k3_kl(torch.randn(5, 7), torch.randn(5, 7)) >= 0).all()


def test_entropy_and_logprobs() -> None:
    logits = torch.tensor([[[0.0, 0.0], [0.0, float("-inf")], [math.log(3.0), 0.0]]])  # [1, 3, 2]
    ent = token_entropy(logits)
    p = torch.tensor([0.75, 0.25])
    assert torch.allclose(ent, torch.tensor([[math.log(2), 0.0, float(-(p * p.log()).sum())]]))
    lp = token_logprobs(logits, torch.tensor([[1, 0, 0]]))
    assert torch.allclose(lp, torch.tensor([[math.log(0.5), 0.0, math.log(0.75)]]))


def test_entropy_gradient_is_finite_with_suppressed_tokens() -> None:
    # suppressed tokens are -inf logits: the entropy bonus must still give finite gradients
    logits = torch.tensor([[[0.5, float("-inf"), -1.0], [0.0, 2.0, float("-inf")]]], requires_grad=True)
    token_entropy(logits).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 0, 1] == 0 and logits.grad[0, 0, 0] != 0


def test_grpo_loss_hand_value_and_mask() -> None:
    # two sequences, T=2; second sequence's last token is padding
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.9]]))
    old = logp.clone()
    ref = torch.log(torch.tensor([[0.25, 0.5], [0.25, 0.1]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    ent = torch.tensor([[0.3, 0.6], [0.9, 5.0]])
    out = grpo_loss(logp, old, ref, adv, mask, clip_eps=0.2, kl_coef=0.1, entropy=ent, entropy_coef=0.01)
    kl0 = 0.5 + math.log(2) - 1  # token (0,0); tokens (0,1) and (1,0) have kl 0
    pg = [-1.0, -1.0, 2.0]
    expected = (sum(pg) + 0.1 * kl0 - 0.01 * (0.3 + 0.6 + 0.9)) / 3
    assert out.loss.item() == pytest.approx(expected, abs=1e-6)
    assert out.kl == pytest.approx(kl0 / 3, abs=1e-6)
    assert out.entropy == pytest.approx(0.6, abs=1e-6)
    assert out.policy == pytest.approx(0.0, abs=1e-6)
    assert out.clip_fraction == 0.0


def test_grpo_loss_gradient_at_ratio_one() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)
    mask = torch.ones(2, 2)
    out = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0, -1.0]), mask, clip_eps=0.2, kl_coef=0.0)
    out.loss.backward()
    # d/dlogp of -(ratio * A) at ratio 1 is -A, averaged over 4 tokens
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))


def test_grpo_loss_needs_ref_and_entropy_when_weighted() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(x, x, None, torch.ones(1), torch.ones(1, 2), clip_eps=0.2, kl_coef=0.1)
    with pytest.raises(ValueError, match="entropy"):
        grpo_loss(x, x, None, torch.ones(1), torch.ones(1, 2), clip_eps=0.2, kl_coef=0.0, entropy_coef=0.1)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(x, x, None, torch.ones(2), torch.ones(1, 2), clip_eps=0.2, kl_coef=0.0)


def test_masked_mean_empty_mask_is_zero() -> None:
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0
