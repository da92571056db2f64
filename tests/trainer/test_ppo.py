"""PPO math: GAE by hand, losses against CleanRL-style formulas, exact on-policy ratio, masks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.algo.ppo import (
    AdaptiveKL,
    gae,
    group_advantages,
    group_advantages_with_kl,
    kl_estimate,
    ppo_policy_loss,
    prefix_advantages,
    value_loss,
)
from agentgym.trainer.config import load_config
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward

# Row layout: prompt, policy, policy (end of turn 1), env token, policy (end of turn 2), pad.
MASK = torch.tensor([[0, 1, 1, 0, 1, 0]])
VALUES = torch.tensor([[0.0, 0.1, 0.2, 0.0, 0.3, 0.0]])
REWARDS = torch.tensor([[0.0, 0.0, 0.5, 0.0, 1.0, 0.0]])


def test_gae_hand_computed() -> None:
    adv, ret = gae(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8)
    # p3: 1.0 + 0 - 0.3 = 0.7
    # p2: 0.5 + 0.9*0.3 - 0.2 = 0.57 ; A = 0.57 + 0.72*0.7 = 1.074
    # p1: 0 + 0.9*0.2 - 0.1 = 0.08 ; A = 0.08 + 0.72*1.074 = 0.85328
    expected = torch.tensor([[0.0, 0.85328, 1.074, 0.0, 0.7, 0.0]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(ret, torch.tensor([[0.0, 0.95328, 1.274, 0.0, 1.0, 0.0]]), rtol=0, atol=1e-6)


def test_gae_bootstrap_and_reward_on_env_token() -> None:
    adv, _ = gae(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8, bootstrap=torch.tensor([2.0]))
    # p3: 1 + 0.9*2 - 0.3 = 2.5 ; p2: 0.57 + 0.72*2.5 = 2.37 ; p1: 0.08 + 0.72*2.37 = 1.7864
    torch.testing.assert_close(adv, torch.tensor([[0.0, 1.7864, 2.37, 0.0, 2.5, 0.0]]), rtol=0, atol=1e-5)
    r = REWARDS.clone()
    r[0, 3] = 0.25  # on the env token: credited to the policy token before it (p2)
    adv2, _ = gae(r, VALUES, MASK, gamma=0.9, lam=0.8)
    assert adv2[0, 2].item() == pytest.approx(0.82 + 0.72 * 0.7, abs=1e-6)


def _cleanrl_gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """CleanRL's loop for one finished episode (next value 0 after the last step)."""
    T = rewards.shape[0]
    adv = torch.zeros(T)
    lastgaelam = 0.0
    for t in reversed(range(T)):
        nextvalues = values[t + 1] if t + 1 < T else 0.0
        nextnonterminal = 1.0 if t + 1 < T else 0.0
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        adv[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return adv


def test_gae_matches_cleanrl_on_compacted_policy_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(3, 20, generator=g), torch.randn(3, 20, generator=g)
    mask = (torch.rand(3, 20, generator=g) > 0.4).long()
    rewards = rewards * mask  # rewards only on policy tokens
    adv, _ = gae(rewards, values, mask, gamma=0.97, lam=0.9)
    for b in range(3):
        idx = mask[b].bool()
        ref = _cleanrl_gae(rewards[b, idx], values[b, idx], 0.97, 0.9)
        torch.testing.assert_close(adv[b, idx], ref, rtol=1e-5, atol=1e-5)
        assert torch.all(adv[b, ~idx] == 0)


def test_group_advantages() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 3.0, 5.0, 7.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    adv = group_advantages(scores, groups)
    m0, s0 = 1 / 3, torch.tensor([1.0, 0.0, 0.0]).std().item()
    expected = [(1 - m0) / (s0 + 1e-6), -m0 / (s0 + 1e-6), -m0 / (s0 + 1e-6),
                -1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6), 0.0]
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=1e-5, atol=1e-6)
    raw = group_advantages(scores, groups, normalize_std=False)
    torch.testing.assert_close(raw, torch.tensor([2 / 3, -1 / 3, -1 / 3, -1.0, 1.0, 0.0]))


def test_prefix_credit_by_hand() -> None:
    # One task, four samples after a 2-token prompt [7, 7]: three take the same first call (1, 2) and
    # then the service answers 5 to two of them and fails (9) for the third; the fourth calls 3.
    rows = [[7, 7, 1, 2, 5, 4], [7, 7, 1, 2, 5, 4], [7, 7, 1, 2, 9, 6], [7, 7, 3, 2]]
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0])
    adv = prefix_advantages(rows, scores, torch.zeros(4), normalize_std=False)
    # first call's token: 1 is worth 2/3 through the node (mean of the first three), the root 1/2
    for i in range(3):
        assert adv[i, 2] == pytest.approx(2 / 3 - 1 / 2)
    assert adv[3, 2] == pytest.approx(0 - 1 / 2)  # the one that called 3 parted at the root
    assert adv[3, 3] == pytest.approx(0 - 1 / 2)  # and every token after its parting counts the same
    for i in range(3):
        assert adv[i, 3] == 0  # the token all three took in the same place: neither up nor down
    assert adv[0, 5] == adv[1, 5] == 0  # the two successes share everything
    # the failure's tokens after the fault (position 5, after the environment's 9) are judged against
    # the deepest node it shares: the first call, worth 2/3
    assert adv[2, 5] == pytest.approx(0 - 2 / 3)
    assert adv.shape == (4, 6) and adv[3, 4:].abs().sum() == 0  # past a row's end: 0
    # summed over the episodes through each node, the credit is the group baseline's gradient with the
    # node's value as baseline; equal scores or a group of one give 0; the std normalises as GRPO's
    assert prefix_advantages(rows, torch.ones(4), torch.zeros(4)).abs().sum() == 0
    assert prefix_advantages(rows, scores, torch.arange(4)).abs().sum() == 0
    std = float(scores.std())
    torch.testing.assert_close(prefix_advantages(rows, scores, torch.zeros(4)), adv / (std + 1e-6))


def test_prefix_credit_on_identical_samples_is_the_group_baseline() -> None:
    rows = [[1, 2, 3]] * 3  # nothing parts them: the only node they differ on is the leaf
    scores = torch.tensor([1.0, 0.0, 0.0])
    adv = prefix_advantages(rows, scores, torch.zeros(3), normalize_std=False)
    assert adv.abs().sum() == 0  # the same tokens in the same places: no token is to blame


def test_a_partial_baseline_subtracts_that_share_of_the_group_mean() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])  # a task solved once in three, one solved twice, one sample
    half = group_advantages(scores, groups, normalize_std=False, baseline_scale=0.5)
    torch.testing.assert_close(half, torch.tensor([1 - 1 / 6, -1 / 6, -1 / 6, 0.5, 0.5, 0.5]))
    # 0: REINFORCE without a baseline (the scores); 1: the usual centred advantages
    torch.testing.assert_close(group_advantages(scores, groups, normalize_std=False, baseline_scale=0.0), scores)
    torch.testing.assert_close(group_advantages(scores, groups, normalize_std=False, baseline_scale=1.0),
                               group_advantages(scores, groups, normalize_std=False))
    with pytest.raises(ValueError, match="no std to divide by"):
        group_advantages(scores, groups, baseline_scale=0.5)


def _cleanrl_pg(newlogprob, b_logprobs, adv, clip_low, clip_high):  # type: ignore[no-untyped-def]
    logratio = newlogprob - b_logprobs
    ratio = logratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return torch.max(pg_loss1, pg_loss2)


def test_policy_loss_matches_cleanrl_formula() -> None:
    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(4, 9, generator=g) * 0.3 - 2, torch.randn(4, 9, generator=g) * 0.3 - 2
    adv = torch.randn(4, 9, generator=g)
    mask = (torch.rand(4, 9, generator=g) > 0.3).long()
    w = torch.rand(4, 9, generator=g) * 2
    loss, stats = ppo_policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, weights=w)
    m = mask.bool()
    ref = (_cleanrl_pg(logp, old, adv, 0.2, 0.28) * w)[m].mean()
    torch.testing.assert_close(loss, ref)
    ratio = (logp - old).exp()[m]
    assert stats["clip_frac"] == pytest.approx(((ratio < 0.8) | (ratio > 1.28)).float().mean().item())
    assert stats["ratio_max"] == pytest.approx(ratio.max().item())
    assert stats["ratio_min"] == pytest.approx(ratio.min().item())
    # asymmetric clip: a ratio of 1.25 is inside [0.8, 1.28] so it is not clipped for A > 0
    l2, s2 = ppo_policy_loss(torch.log(torch.tensor([[1.25]])), torch.zeros(1, 1), torch.ones(1, 1),
                             torch.ones(1, 1))
    assert l2.item() == pytest.approx(-1.25) and s2["clip_frac"] == 0.0


def test_value_loss_matches_cleanrl_formula() -> None:
    g = torch.Generator().manual_seed(2)
    v, old, ret = (torch.randn(3, 7, generator=g) for _ in range(3))
    mask = (torch.rand(3, 7, generator=g) > 0.3).long()
    m = mask.bool()
    v_loss_unclipped = (v - ret) ** 2
    v_clipped = old + torch.clamp(v - old, -0.2, 0.2)
    v_loss_clipped = (v_clipped - ret) ** 2
    ref = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped)[m].mean()
    torch.testing.assert_close(value_loss(v, old, ret, mask, clip=0.2), ref)
    torch.testing.assert_close(value_loss(v, old, ret, mask, clip=None), 0.5 * v_loss_unclipped[m].mean())


def test_kl_estimates() -> None:
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), logp - ref)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), 0.5 * (logp - ref) ** 2)
    r = torch.exp(ref - logp)
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), r - 1 - (ref - logp))
    assert torch.all(kl_estimate(logp, ref, "k3") >= 0)
    with pytest.raises(ConfigError):
        kl_estimate(logp, ref, "k9")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_which_kl_each_estimator_optimises_in_the_loss(seed: int) -> None:
    """Exact expectations over small categorical distributions: the loss term's gradient with
    the sampled token held fixed, averaged under pi, is grad KL(pi || ref) for k2, grad
    KL(ref || pi) for k3, and 0 for k1 (why the trainer refuses k1 in the loss)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_(True)
    ref = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64) * 0.7, -1)

    def expected_grad(kind: str) -> torch.Tensor:
        logp = torch.log_softmax(logits, -1)
        pi = logp.exp().detach()  # the sampling distribution: not differentiated
        est = kl_estimate(logp[None], ref[None], kind)[0]  # one "sample" per token of the support
        (grad,) = torch.autograd.grad((pi * est).sum(), logits)
        return grad

    def grad_of(kl: Any) -> torch.Tensor:
        logp = torch.log_softmax(logits, -1)
        (grad,) = torch.autograd.grad(kl(logp), logits)
        return grad

    forward = grad_of(lambda lp: (lp.exp() * (lp - ref)).sum())  # KL(pi || ref)
    reverse = grad_of(lambda lp: (ref.exp() * (ref - lp)).sum())  # KL(ref || pi)
    torch.testing.assert_close(expected_grad("k2"), forward)
    torch.testing.assert_close(expected_grad("k3"), reverse)
    torch.testing.assert_close(expected_grad("k1"), torch.zeros_like(forward), atol=1e-12, rtol=0)
    assert (forward - reverse).abs().max() > 1e-3  # the two KLs really differ here


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_only_k1_as_a_reward_gives_the_kl_gradient(seed: int) -> None:
    """As a reward the penalty's estimate is a detached return: the policy-gradient step is
    E_pi[est * grad log pi] (score function). Exactly, over a small categorical: that is
    grad KL(pi || ref) for k1 and not for k2 or k3 (why the trainer accepts only k1 there)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_(True)
    ref = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64) * 0.7, -1)
    logp = torch.log_softmax(logits, -1)
    pi = logp.exp().detach()
    (true,) = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), logits, retain_graph=True)

    def reward_grad(kind: str) -> torch.Tensor:
        est = kl_estimate(logp.detach()[None], ref[None], kind)[0]  # the penalty: a number, no gradient
        (grad,) = torch.autograd.grad((pi * est * logp).sum(), logits, retain_graph=True)
        return grad

    torch.testing.assert_close(reward_grad("k1"), true)
    for kind in ("k2", "k3"):
        assert (reward_grad(kind) - true).abs().max() > 1e-3


def test_kl_estimators_other_than_k1_are_refused_as_a_reward() -> None:
    with pytest.raises(ConfigError, match="only k1 .*fix: ppo.kl_estimator=k1, or ppo.kl_in=loss"):
        load_config(None, ["ppo.kl_coef=0.1", "ppo.kl_in=reward", "ppo.kl_estimator=k3"])
    with pytest.raises(ConfigError, match="ppo.kl_estimator=k2 with ppo.kl_in=reward"):
        load_config(None, ["ppo.kl_coef=0.1", "ppo.kl_in=reward", "ppo.kl_estimator=k2"])
    assert load_config(None, ["ppo.kl_coef=0.1", "ppo.kl_in=reward", "ppo.kl_estimator=k1"]).ppo.kl_in == "reward"


def test_kl_in_reward_with_group_baseline_normalises_the_outcome_first() -> None:
    """A group whose outcomes are all equal: its KL penalties of 1e-4 must stay 1e-4-sized, not
    be divided by the group's ~0 std into advantages of about +-1."""
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    pen = torch.tensor([1e-4, 2e-4, 0.5e-4, 1.5e-4, 1e-4, 1e-4, 1e-4, 1e-4])
    adv = group_advantages_with_kl(scores, pen, groups)
    assert adv[:4].abs().max() < 1e-3  # the old order (penalise, then normalise) gave ~1.2 here
    naive = group_advantages(scores - pen, groups)
    assert naive[:4].abs().max() > 0.5
    torch.testing.assert_close(adv[4:], group_advantages(scores, groups)[4:])  # equal penalties cancel
    assert adv[1] < adv[0] < adv[2]  # a larger penalty, a lower advantage


def test_k3_is_bounded_per_token_and_gives_no_gradient_beyond_the_bound() -> None:
    # a sampled token the policy has pushed 9 nats below the reference: k3 = e^9 - 10 ~ 8,093
    logp = torch.tensor([[-10.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.2]])
    k3 = kl_estimate(logp, ref, "k3")
    assert k3[0, 0].item() == 10.0  # bounded (verl's low_var_kl clamp) ...
    assert 0 < k3[0, 1].item() < 0.1  # ... ordinary tokens untouched
    k3.sum().backward()
    assert logp.grad is not None and logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() != 0.0


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return build_tiny_gptoss(264, seed=0)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 263, (3, 40), generator=g)
    attn = torch.ones_like(ids)
    attn[2, 30:] = 0  # right padding
    pmask = torch.zeros_like(ids)
    pmask[:, 10:18] = 1  # turn 1 action
    pmask[:, 25:30] = 1  # turn 2 action; 18..24 are environment tokens
    return ids, attn, pmask


def test_on_policy_ratio_is_exactly_one(tiny: torch.nn.Module) -> None:
    ids, attn, pmask = _batch()
    out = policy_forward(tiny, ids, attn)
    old = out.logprobs.detach()
    ratio = torch.exp(out.logprobs - old)
    assert torch.equal(ratio, torch.ones_like(ratio))
    adv = torch.randn(ids.shape, generator=torch.Generator().manual_seed(4))
    loss, stats = ppo_policy_loss(out.logprobs, old, adv, pmask)
    assert stats["ratio_min"] == 1.0 and stats["ratio_max"] == 1.0 and stats["ratio_mean"] == 1.0
    assert stats["clip_frac"] == 0.0
    # and the gradient is the plain policy gradient -A * grad log p
    loss.backward()
    g1 = [p.grad.clone() for p in tiny.parameters() if p.grad is not None]
    tiny.zero_grad()
    out2 = policy_forward(tiny, ids, attn)
    (-(adv * out2.logprobs)[pmask.bool()].mean()).backward()
    g2 = [p.grad.clone() for p in tiny.parameters() if p.grad is not None]
    tiny.zero_grad()
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_policy_mask_excludes_environment_tokens(tiny: torch.nn.Module) -> None:
    ids, attn, pmask = _batch()
    saved: list[torch.Tensor] = []

    def keep(_m: torch.nn.Module, _i: object, out: torch.Tensor) -> None:
        out.retain_grad()
        saved.append(out)

    h = tiny.get_output_embeddings().register_forward_hook(keep)
    try:
        out = policy_forward(tiny, ids, attn)
    finally:
        h.remove()
    adv = torch.randn(ids.shape, generator=torch.Generator().manual_seed(5))
    loss, _ = ppo_policy_loss(out.logprobs, out.logprobs.detach(), adv, pmask)
    loss = loss - 0.01 * (out.entropy * pmask).sum() / pmask.sum()
    assert not out.entropy.requires_grad  # only with entropy_grad=True
    loss.backward()
    tiny.zero_grad()
    (logits,) = saved  # (B * (T-1), V): row b * (T-1) + t-1 predicts token t of row b
    assert logits.grad is not None
    grad = logits.grad.view(ids.shape[0], ids.shape[1] - 1, -1)
    predicts_policy = pmask[:, 1:].bool()
    assert torch.all(grad[~predicts_policy] == 0)  # env, prompt and padding: exactly zero
    assert torch.all(grad[predicts_policy].abs().sum(-1) > 0)


def test_adaptive_kl_doubles_above_the_band_and_halves_below_it_down_to_its_start() -> None:
    kl = AdaptiveKL(0.1, target=0.04)  # band: (0.04 / 1.5, 0.06]
    assert [kl.update(x) for x in (0.0, 0.07, 0.07, 0.05, None, float("nan"), 0.02, 0.02, 0.0)] == \
        pytest.approx([0.1, 0.2, 0.4, 0.4, 0.4, 0.4, 0.2, 0.1, 0.1])
    fixed = AdaptiveKL(0.1, target=None)
    assert [fixed.update(x) for x in (0.0, 5.0)] == [0.1, 0.1]
