"""PPO math as pure functions on (B, T) token tensors.

Token layout: one row per episode, one column per token. ``mask`` (B, T) is 1 on *policy
tokens* (tokens the policy sampled: assistant actions) and 0 on prompt, environment
(tool-result) and padding tokens. Every statistic and loss averages over policy tokens only
(token-level aggregation: sum over all policy tokens of the batch / number of policy tokens),
so a long episode weighs in proportion to its length and padding never counts.

Micro-batches: every loss takes ``denom``, the number of policy tokens of the *whole*
(mini)batch (summed over data-parallel ranks), so that summing the gradients of the
micro-batches' losses gives exactly the gradient of the full batch's token mean.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from agentgym.errors import ConfigError

__all__ = [
    "AdaptiveKL",
    "KL_ESTIMATORS",
    "KL_IN_LOSS",
    "gae",
    "group_advantages",
    "group_advantages_with_kl",
    "kl_estimate",
    "kl_reward_penalty",
    "RewardNorm",
    "masked_mean",
    "on_last_policy_token",
    "placebo_permutation",
    "ppo_policy_loss",
    "prefix_advantages",
    "value_loss",
]

class RewardNorm:
    """``ppo.normalize_rewards``: the running std of every score seen so far (all ranks',
    Welford), by which a step's scores are divided (at least 1e-3)."""

    def __init__(self, state: list[float] | None = None) -> None:
        self.n, self.mean, self.m2 = state or [0, 0.0, 0.0]

    def update(self, scores: torch.Tensor) -> float:
        """Add this step's ``scores`` (N,) -> the std to divide them by."""
        n, mean, m2 = self.n, self.mean, self.m2
        for x in scores.tolist():
            n += 1
            d = x - mean
            mean += d / n
            m2 += d * (x - mean)
        self.n, self.mean, self.m2 = n, mean, m2
        return max(math.sqrt(m2 / max(n - 1, 1)), 1e-3)

    def state(self) -> list[float]:
        return [self.n, self.mean, self.m2]


class AdaptiveKL:
    """``ppo.kl_target``: the KL penalty's coefficient, adapted after each step (the adaptive KL
    penalty of Schulman et al. 2017, with a floor): doubled when the step's KL to the reference
    was above 1.5 x ``target``, halved when below ``target`` / 1.5 but never below its starting
    value ``coef`` (at the first steps KL is ~0, and halving from there would leave no pull by
    the time KL rises), kept otherwise. ``target`` None: fixed at ``coef``."""

    def __init__(self, coef: float, target: float | None) -> None:
        self.floor = self.coef = coef
        self.target = target

    def update(self, kl: float | None) -> float:
        """After a step whose KL to the reference was ``kl`` -> the coefficient of the next one."""
        if self.target is not None and kl is not None and math.isfinite(kl):
            if kl > 1.5 * self.target:
                self.coef *= 2.0
            elif kl < self.target / 1.5:
                self.coef = max(self.coef / 2.0, self.floor)
        return self.coef


LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: finite in float32, far beyond any clip range
K3_CLAMP = 10.0  # per-token k3 bound (verl's low_var_kl): one rare token cannot own the loss


def masked_mean(x: torch.Tensor, mask: torch.Tensor, denom: float | None = None) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is 1, divided by ``denom`` (default: the
    number of those positions, i.e. their mean; 0 if the mask is empty)."""
    m = mask.to(x.dtype)
    d = m.sum().clamp(min=1.0) if denom is None else max(float(denom), 1.0)
    return (x * m).sum() / d


@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    bootstrap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over policy tokens only -> (advantages, returns), (B, T).

    The MDP's steps are the policy tokens of a row, in order; environment tokens are not
    decisions and are skipped by the recursion (no discounting across them). With ``p`` the
    policy positions and ``p+`` the next policy position of the same row::

        delta_p = r_p + gamma * V_{p+} - V_p
        A_p     = delta_p + gamma * lam * A_{p+}
        R_p     = A_p + V_p

    After the last policy token ``V`` is ``bootstrap`` (B,) (default 0: the episode ended;
    pass the value of the truncation state for truncated episodes) and ``A`` is 0.

    Reward placement (the caller's job): put a turn's reward on the *last policy token of
    that turn* (for sparse rewards, the final policy token of the episode). A reward found on
    a non-policy position (e.g. an environment token) is credited, undiscounted, to the
    nearest policy token before it. ``values`` are aligned like ``ForwardOut.values``.
    Advantages and returns are 0 outside ``mask``.
    """
    B, T = rewards.shape
    m = mask.to(torch.bool)
    rewards, values = rewards.float(), values.float()
    next_value = torch.zeros(B, device=values.device) if bootstrap is None else bootstrap.float().clone()
    next_adv = torch.zeros(B, device=values.device)
    pending = torch.zeros(B, device=values.device)  # rewards seen on non-policy tokens
    adv = torch.zeros(B, T, device=values.device)
    for t in range(T - 1, -1, -1):
        mt = m[:, t]
        r = rewards[:, t] + pending
        delta = r + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(mt, a, torch.zeros_like(a))
        next_adv = torch.where(mt, a, next_adv)
        next_value = torch.where(mt, values[:, t], next_value)
        pending = torch.where(mt, torch.zeros_like(pending), pending + rewards[:, t])
    returns = torch.where(m, adv + values, torch.zeros_like(adv))
    return adv, returns


@torch.no_grad()
def group_advantages(
    scores: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True, eps: float = 1e-6,
    baseline_scale: float = 1.0,
) -> torch.Tensor:
    """GRPO-style baseline: ``(score - mean of its group) [/ (std of its group + eps)]`` -> (N,).

    ``group_ids`` (N,) marks samples of the same task. The std is the sample std (N-1, as in
    TRL's GRPO); a group of one sample gets advantage 0. Broadcast the result over each
    episode's policy tokens to use it as a per-token advantage. ``baseline_scale`` s < 1 (only
    without the std) subtracts ``s x`` the group's mean instead: ``score - s * mean``, so every
    episode of a group keeps ``(1 - s) x`` its score on top of the centred part (s = 0:
    REINFORCE without a baseline).
    """
    if baseline_scale != 1.0:
        if normalize_std:
            raise ValueError("baseline_scale < 1 keeps uniform groups nonzero; they have no std to divide by")
        centered = group_advantages(scores, group_ids, normalize_std=False)
        return centered + (1.0 - baseline_scale) * (scores.float() - centered)
    scores = scores.float()
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max().item()) + 1 if inv.numel() else 0
    count = torch.zeros(n_groups, device=scores.device).index_add_(0, inv, torch.ones_like(scores))
    total = torch.zeros(n_groups, device=scores.device).index_add_(0, inv, scores)
    mean = total / count
    centered = scores - mean[inv]
    if not normalize_std:
        return torch.where(count[inv] > 1, centered, torch.zeros_like(centered))
    sq = torch.zeros(n_groups, device=scores.device).index_add_(0, inv, centered**2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    adv = centered / (std[inv] + eps)
    return torch.where(count[inv] > 1, adv, torch.zeros_like(adv))


@torch.no_grad()
def group_advantages_with_kl(
    scores: torch.Tensor, penalties: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True,
    baseline_scale: float = 1.0,
) -> torch.Tensor:
    """Group baseline with the KL in the reward (``kl_in: reward``) -> (N,).

    The *outcome* scores are normalised within their group first (:func:`group_advantages`);
    then each episode's KL penalty (``penalties`` (N,): its per-token penalties summed), centred
    on its group's mean, is subtracted. Normalising the penalised score instead divides the
    KL's noise by the std of a group whose outcomes are all equal (~0 + eps) and turns
    penalties of 1e-4 into advantages of about +-1.
    """
    adv = group_advantages(scores, group_ids, normalize_std=normalize_std, baseline_scale=baseline_scale)
    return adv - group_advantages(penalties, group_ids, normalize_std=False)


@torch.no_grad()
def prefix_advantages(
    rows: list[list[int]], scores: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Token-level credit from the tree a group's samples make (``ppo.advantage: prefix``) -> (N, T).

    The samples of a task share their prompt and, often, their first actions and observations,
    then part: at a token one sampled differently, or at an observation the environment drew
    differently (a fault). Each node of that token tree (a prefix) is worth the mean score of
    the group's episodes that pass through it. The token at position ``t`` of episode ``i``
    gets ``v(prefix through t) - v(prefix before t)``: 0 on a token every episode through that
    prefix took, the episode's score minus the value of the node where it parted from the others
    on the token where it did and on every token after it (a node only it passes through has no
    value of its own: the deepest node it shares stands in). So the actions shared by successes
    and failures (the correct calls before a fault) are neither pushed up nor down, and a choice
    is judged against the episodes that reached the same place. Summed over the episodes
    through a node this is the group baseline's gradient with each token's baseline the value of
    its own prefix. ``rows`` are the episodes' tokens (N lists, the prompt included),
    ``normalize_std`` divides by the group's score std as :func:`group_advantages` does; a
    group of one episode, or whose scores are equal, gets 0. Columns past a row's end are 0.
    """
    n, width = len(rows), max((len(r) for r in rows), default=0)
    adv = torch.zeros(n, width)
    scores = scores.float().cpu()
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids.tolist()):
        members.setdefault(int(g), []).append(i)
    for idx in members.values():
        if len(idx) < 2:
            continue
        r = scores[idx]
        std = float(r.std()) if normalize_std else 1.0
        toks = [torch.as_tensor(rows[i], dtype=torch.long) for i in idx]
        for a, i in enumerate(idx):
            others = [b for b in range(len(idx)) if b != a]
            lcp = torch.tensor([_common_prefix(toks[a], toks[b]) for b in others], dtype=torch.float32)  # (n-1,)
            pos = torch.arange(len(rows[i]), dtype=torch.float32)[:, None]  # (L, 1)
            shared = pos.clamp(max=float(lcp.max()))  # a node only this episode reaches: the deepest shared
            after = torch.where(pos + 1 <= lcp.max(), pos + 1, torch.full_like(pos, math.inf))
            # v(through t) - v(before t); past the parting the node is its own, worth its score
            delta = _node_value(after, lcp, r[a], r[others]) - _node_value(shared, lcp, r[a], r[others])
            adv[i, :len(rows[i])] = delta / (std + eps) if normalize_std else delta
    return adv


def _node_value(depth: torch.Tensor, lcp: torch.Tensor, own: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """Mean score of the episodes through an episode's prefix of each ``depth`` (L, 1): itself (score
    ``own``) and each other one whose common prefix with it, ``lcp`` (n-1,), is at least that long."""
    through = (lcp[None, :] >= depth).float()  # (L, n-1)
    return (own + through @ others) / (1.0 + through.sum(1))


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    m = min(len(a), len(b))
    same = (a[:m] == b[:m]).long()
    return int(same.cumprod(0).sum())


def ppo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    weights: torch.Tensor | None = None,
    denom: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate with separate low/high clip, token-level aggregation.

    ``ratio = exp(logp - old_logp)`` (log-ratio clamped to +-20), per token
    ``loss_t = w_t * max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - clip_low, 1 + clip_high))``,
    loss = sum over policy tokens / ``denom`` (default: their number). ``weights`` (B, T) are
    the rollout-correction weights (detached here). Stats over this call's policy tokens:
    ratio mean/min/max, clip_frac (share of policy tokens whose ratio left the clip range, as
    CleanRL counts it), approx_kl (k3 of old vs new) and n_tokens (to combine micro-batches).
    """
    m = mask.to(torch.bool)
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(pg1, pg2)
    if weights is not None:
        per_token = per_token * weights.detach()
    loss = masked_mean(per_token, m, denom)
    with torch.no_grad():
        r = ratio[m]
        clipped = ((r < 1.0 - clip_low) | (r > 1.0 + clip_high)).float()
        lr = log_ratio[m]
        has = r.numel() > 0
        stats = {
            "ratio_mean": r.mean().item() if has else 1.0,
            "ratio_min": r.min().item() if has else 1.0,
            "ratio_max": r.max().item() if has else 1.0,
            "clip_frac": clipped.mean().item() if has else 0.0,
            "approx_kl": ((r - 1.0) - lr).mean().item() if has else 0.0,
            "n_tokens": float(r.numel()),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float | None = 0.2,
    denom: float | None = None,
) -> torch.Tensor:
    """CleanRL's value loss over policy tokens: ``0.5 * max((V-R)^2, (V_clip-R)^2)``.

    ``V_clip = old_values + clamp(values - old_values, -clip, clip)``; ``clip=None`` gives the
    plain ``0.5 * (V-R)^2``. Token-level mean over ``mask`` (sum / ``denom`` if given).
    """
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * masked_mean(unclipped, mask, denom)
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (v_clipped - returns) ** 2
    return 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask, denom)


KL_ESTIMATORS = ("k1", "k2", "k3")
KL_IN_LOSS = ("k2", "k3")  # k1's loss gradient is zero in expectation (see kl_estimate)


def kl_estimate(
    logp: torch.Tensor, ref_logp: torch.Tensor, kind: Literal["k1", "k2", "k3"] = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi -> (B, T).

    With ``log r = log ref - log pi`` at the sampled token (Schulman's estimators):

    * ``k1 = -log r``: unbiased for KL(pi || ref), can be negative. As a *reward* penalty
      (``kl_in: reward``) it is the classic RLHF term. In the *loss* it is useless: its
      gradient with the samples held fixed is ``grad log pi``, whose expectation under pi is 0;
      the trainer refuses it there.
    * ``k2 = 0.5 * (log r)^2``: biased as a value, but its gradient in the loss,
      ``(log pi - log ref) grad log pi``, has expectation ``grad KL(pi || ref)``: in the loss
      k2 optimises the KL the docs name.
    * ``k3 = r - 1 - log r``: unbiased for KL(pi || ref) as a value, >= 0, lower variance. Its
      gradient in the loss, ``(1 - ref/pi) grad log pi``, has expectation
      ``-sum_a ref(a) grad log pi(a) = grad KL(ref || pi)``: in the loss k3 optimises the
      *reverse* KL (mass-covering: it punishes pi for dropping what ref does, less for
      putting mass where ref has little). Both KLs are 0 at pi = ref and agree to second
      order near it. tests/trainer/test_ppo.py checks all three expectations exactly on small
      categorical distributions.

    Log-ratios are clamped to +-20, and k3 to at most ``K3_CLAMP`` = 10 per token, as verl's
    ``low_var_kl``: k3 is heavy-tailed where the policy samples a token it has moved far below
    the reference (r = 1e3 gives k3 ~ 1e3 and a gradient of the same size), so one such token
    in a batch of thousands can make a step's KL and its gradient. Beyond the bound the token
    gets no KL gradient and the estimate is biased low, for those rare tokens only.
    """
    log_r = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    if kind == "k3":
        return (torch.exp(log_r) - 1.0 - log_r).clamp(max=K3_CLAMP)
    raise ConfigError(f"kl kind must be one of {list(KL_ESTIMATORS)}, got {kind!r}")


@torch.no_grad()
def kl_reward_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, *, coef: float,
    estimator: Literal["k1", "k2", "k3"],
) -> torch.Tensor:
    """The per-token KL penalty of ``kl_in: reward`` -> (B, T): ``coef * kl_estimate(logp,
    ref_logp, estimator)`` on policy tokens, 0 elsewhere. Subtract it from the token rewards
    (GAE) or its row sums from the scores (group baseline)."""
    return coef * kl_estimate(logp, ref_logp, estimator) * mask.to(logp.dtype)


def placebo_permutation(n: int, seed: int, step: int) -> torch.Tensor:
    """The placebo arm's shuffle of one step's ``n`` episodes (all ranks'): a pure function of
    (seed, step), the same on every rank."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 15485863 + step * 7 + 3))


def on_last_policy_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) returns -> (B, T) rewards: each row's return on its last policy token."""
    out = torch.zeros_like(mask, dtype=torch.float32)
    cols = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), cols, torch.full_like(cols, -1)).max(-1).values  # (B,)
    has = last >= 0
    out[has.nonzero().flatten(), last[has]] = scores[has].float()
    return out


