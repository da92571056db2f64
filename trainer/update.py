"""PPO's update of one step, after the scoring and the advantages.

    batch = score(make_batch(trajs, groups, pad_id=learner.pad_id), cfg, step, learner.ranks, norm)
    metrics = compute_advantages(learner, batch, cfg, step)
    metrics |= ppo_update(learner, batch, cfg, step)

:func:`score` sets each episode's return: the outcome scores of all ranks are gathered;
``ppo.placebo`` permutes them (:func:`~agentgym.trainer.algo.ppo.placebo_permutation`, seeded by (seed, step)) and the
permuted return sits on each episode's last policy token; ``ppo.normalize_rewards`` divides
them by the running std of every score seen (:class:`~agentgym.trainer.algo.ppo.RewardNorm`).

:func:`compute_advantages` is the one place advantages are made, before any gradient:
``ppo.advantage: group`` normalises each episode's score within its task's group (all ranks'
scores); ``prefix`` gives each token the change in value its prefix makes in the tree of the
group's samples (:func:`~agentgym.trainer.algo.ppo.prefix_advantages`); ``gae`` runs GAE over the policy tokens with the value head's values before the
update (a no-grad pass before the epochs, as CleanRL does), the same advantages for every
epoch and minibatch. ``kl_in: reward`` first subtracts the KL penalty (per token for GAE; after the
normalisation of the outcome for the group baseline,
:func:`~agentgym.trainer.algo.ppo.group_advantages_with_kl`).

Old log-probs. With one epoch and one minibatch every micro-batch's old log-probs are the
detached log-probs of its own differentiated pass (ratio exactly 1). Otherwise, and when the
KL goes into the reward, the no-grad pass over the *same* micro-batches gives them before the
update; on CPU it is bitwise equal to the first epoch's differentiated pass, so the first
minibatch's ratio is still exactly 1 (and GAE's values are those of that pass).

:func:`ppo_update`: ``ppo.epochs`` passes over ``ppo.minibatches`` shuffled minibatches, one
optimizer step each. Memory is bounded by ``ppo.micro_batch_tokens``, not by the batch: a
minibatch's rows are cut into micro-batches of at most that many padded tokens
(:func:`~agentgym.trainer.algo.batch.micro_batches`), each does its forward and backward, and the
gradients accumulate. Every loss term is a sum over the micro-batch's policy tokens divided by
the policy-token count of the whole minibatch on all ranks, so the accumulated gradient is the
full minibatch's token mean whatever the split (tested against one single-batch pass).
Correction weights are per sequence and computed per micro-batch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Literal, cast

import torch

from .algo.batch import Batch, micro_batches
from .algo.correction import correction_weights, mismatch_by_staleness, mismatch_stats
from .algo.optim import adam_step_rms, check_finite
from .algo.ppo import (
    RewardNorm,
    gae,
    group_advantages,
    group_advantages_with_kl,
    kl_estimate,
    kl_reward_penalty,
    masked_mean,
    on_last_policy_token,
    placebo_permutation,
    ppo_policy_loss,
    prefix_advantages,
    value_loss,
)
from .config import TrainConfig
from .distributed import Ranks

if TYPE_CHECKING:
    from .learner import Learner

__all__ = ["compute_advantages", "ppo_update", "score"]


class _Stats:
    """Sums and extremes of one minibatch, reduced over micro-batches and ranks in one go."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.maxes: dict[str, float] = {}

    def add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value)

    def top(self, key: str, value: float) -> None:  # max; store -x for a min
        self.maxes[key] = max(self.maxes.get(key, -math.inf), float(value))

    def reduce(self) -> dict[str, float]:
        import torch.distributed as dist

        keys_s, keys_m = sorted(self.sums), sorted(self.maxes)
        s = torch.tensor([self.sums[k] for k in keys_s], dtype=torch.float64)
        m = torch.tensor([self.maxes[k] for k in keys_m], dtype=torch.float64)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(s)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
        return {**dict(zip(keys_s, s.tolist(), strict=True)), **dict(zip(keys_m, m.tolist(), strict=True))}


def score(b: Batch, cfg: TrainConfig, step: int, ranks: Ranks, norm: RewardNorm | None = None) -> Batch:
    """A copy of ``b`` with each episode's return in ``scores`` (B,) and on its tokens in ``rewards`` (B, T):
    the env's outcome, permuted for the placebo arm, divided by the running std of the scores
    with ``ppo.normalize_rewards`` (``norm``, updated with this step's scores of all ranks)."""
    B = len(b)
    outcome = ranks.gather_rows(b.scores)  # (N,) every rank's episodes, in rank order
    all_scores = outcome
    b = dataclasses.replace(b, rewards=b.rewards.clone(), scores=b.scores.clone())
    if cfg.ppo.placebo:  # the control: each episode learns from another episode's return
        offset = ranks.rows_before(B)
        all_scores = outcome[placebo_permutation(len(outcome), cfg.seed, step)]
        b.scores = all_scores[offset:offset + B]
        b.rewards = on_last_policy_token(b.scores, b.policy_mask)
    if norm is not None:
        std = norm.update(outcome)
        b.rewards, b.scores, all_scores = b.rewards / std, b.scores / std, all_scores / std
    check_finite("rewards", all_scores, step, "Check the environment's rewards and shaping.")
    return b


def compute_advantages(learner: Learner, b: Batch, cfg: TrainConfig, step: int) -> dict[str, float]:
    """Fill ``b.advantages`` (and for GAE ``b.returns`` and ``b.old_values``), plus the no-grad
    log-probs the update needs first (``b.old_logp``, the reference's ``b.ref_logp``): the one
    place advantages are computed (module doc). -> metrics (``kl_reward``, ``micro_batches``)."""
    p, T, ranks = cfg.ppo, cfg.rollout.temperature, learner.ranks
    mask, gae_mode = b.policy_mask, p.advantage == "gae"
    plan = micro_batches(b.lengths, torch.arange(len(b)), p.micro_batch_tokens)
    metrics = {"micro_batches": float(len(plan))}
    b.advantages = b.returns = b.old_logp = b.old_values = b.ref_logp = None
    if learner.ref_model is not None:
        b.ref_logp, _ = learner.score_rows(learner.ref_model, b, plan, temperature=T, values=False)
    kl_reward = b.ref_logp is not None and p.kl_in == "reward" and p.kl_coef > 0
    exact = p.epochs == 1 and p.minibatches == 1 and not kl_reward  # old log-probs: the update's own pass
    if not exact or gae_mode:
        old_logp, b.old_values = learner.score_rows(learner.model, b, plan, temperature=T, values=gae_mode)
        b.old_logp = None if exact else old_logp
    rewards, pen = b.rewards, None
    if kl_reward:
        assert b.ref_logp is not None
        pen = kl_reward_penalty(old_logp, b.ref_logp, mask, coef=p.kl_coef, estimator=_estimator(cfg))  # (B, T)
        rewards = rewards - pen
        metrics["kl_reward"] = ranks.sum(float(pen.sum())) / max(ranks.sum(float(mask.sum())), 1.0) / p.kl_coef
    if gae_mode:
        assert b.old_values is not None
        last = b.old_values.gather(1, b.lengths[:, None]).squeeze(1)  # V after the last token
        boot = torch.where(b.truncated, last, torch.zeros_like(last))
        b.advantages, b.returns = gae(rewards, b.old_values, mask, gamma=p.gamma, lam=p.lam, bootstrap=boot)
        check_finite("advantages", b.advantages, step, "Check rewards and the value head.")
        return {**metrics, **_negative_share(b, ranks)}
    groups, all_scores = ranks.gather_rows(b.group_ids + 0), ranks.gather_rows(b.scores)  # global task ids
    offset = ranks.rows_before(len(b))
    if p.advantage == "prefix":  # token-level: each token against the episodes through its prefix
        rows = ranks.gather([b.input_ids[i, :n].tolist() for i, n in enumerate(b.lengths.tolist())])
        adv = prefix_advantages(rows, all_scores, groups, normalize_std=p.group_std_normalize)
        adv = adv[offset:offset + len(b)].to(mask.device, mask.dtype)
        check_finite("advantages", adv, step, "Check rewards.")
        w = min(adv.shape[1], mask.shape[1])
        b.advantages = torch.zeros_like(mask)
        b.advantages[:, :w] = adv[:, :w] * mask[:, :w]
        return {**metrics, **_negative_share(b, ranks)}
    if p.advantage == "batch":  # one baseline for the whole step
        groups = torch.zeros_like(groups)
    if pen is None:
        seq_adv = group_advantages(all_scores, groups, normalize_std=p.group_std_normalize,
                                   baseline_scale=p.baseline_scale)
    else:  # normalise the outcome first, then the (centred) KL penalty
        seq_adv = group_advantages_with_kl(all_scores, ranks.gather_rows(pen.sum(-1)), groups,
                                           normalize_std=p.group_std_normalize, baseline_scale=p.baseline_scale)
    seq_adv = seq_adv[offset:offset + len(b)]
    check_finite("advantages", seq_adv, step, "Check rewards.")
    b.advantages = seq_adv[:, None] * mask  # (B, T): one advantage per episode, on its policy tokens
    return {**metrics, **_negative_share(b, ranks)}


def _negative_share(b: Batch, ranks: Ranks) -> dict[str, float]:
    """``adv_neg_frac``: the share of policy tokens whose advantage is negative (0 for REINFORCE
    on successes: the update then only pushes sampled tokens up)."""
    assert b.advantages is not None
    m = b.policy_mask > 0
    neg = ranks.sum(float((b.advantages[m] < 0).sum()))
    return {"adv_neg_frac": neg / max(ranks.sum(float(m.sum())), 1.0)}


def ppo_update(learner: Learner, b: Batch, cfg: TrainConfig, step: int, kl_coef: float | None = None) -> dict[str, float]:
    """PPO's clipped update of step ``step`` on this rank's rows ``b``, whose advantages
    :func:`compute_advantages` set: ``ppo.epochs`` passes over ``ppo.minibatches`` shuffled
    minibatches, one optimizer step each, its gradient accumulated over micro-batches (module
    doc); the KL penalty's weight is ``kl_coef`` (default ``ppo.kl_coef``). -> the metrics, each the mean over the optimizer steps (``*_first``: the first step's;
    ``ratio_max`` / ``ratio_min``: the extremes) and the engine/learner mismatch statistics."""
    p, c, mask = cfg.ppo, cfg.correction, b.policy_mask
    old_full = torch.zeros_like(b.behaviour_logp)  # the old log-probs and weights, for mismatch stats
    w_full = torch.zeros_like(b.behaviour_logp)
    gen = torch.Generator().manual_seed(cfg.seed * 104729 + step)
    acc: dict[str, list[float]] = {}
    for epoch in range(p.epochs):
        order = torch.randperm(len(b), generator=gen) if p.minibatches > 1 else torch.arange(len(b))
        for mb in order.chunk(p.minibatches):
            n_tok = learner.ranks.sum(float(mask[mb].sum()))  # policy tokens of the minibatch, all ranks
            st = _Stats()
            learner.optimizer.zero_grad(set_to_none=True)
            for rows in micro_batches(b.lengths, mb, p.micro_batch_tokens):
                old_lp, weights = _micro_batch(learner, b.select(rows), cfg, step, n_tok, st,
                                               p.kl_coef if kl_coef is None else kl_coef)
                if epoch == 0:
                    w = old_lp.shape[1]
                    old_full[rows, :w], w_full[rows, :w] = old_lp, weights
            for key, v in _optimizer_step(learner, p.max_grad_norm, step, st, n_tok).items():
                acc.setdefault(key, []).append(float(v))
    out = {k: sum(v) / len(v) for k, v in acc.items()}
    for key in ("ratio_min", "ratio_max", "clip_frac"):
        out[f"{key}_first"] = acc[key][0]
    out["ratio_max"], out["ratio_min"] = max(acc["ratio_max"]), min(acc["ratio_min"])
    gathered = (learner.ranks.gather_rows(x) for x in (old_full, b.behaviour_logp, mask, w_full))
    out.update({f"mismatch_{k}": v for k, v in mismatch_stats(
        *gathered, threshold=c.threshold, mode=c.mode).items()})
    if cfg.rollout.mode == "async" and b.versions is not None and learner.ranks.world == 1:
        out.update(mismatch_by_staleness(old_full, b.behaviour_logp, mask, w_full, b.versions, step,
                                         cfg.rollout.max_staleness, threshold=c.threshold, mode=c.mode))
    return out


def _micro_batch(learner: Learner, sub: Batch, cfg: TrainConfig, step: int, n_tok: float,
                 st: _Stats, kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward of one micro-batch: the clipped policy loss, minus the entropy
    bonus, plus the value loss (GAE) and the KL to the reference (``kl_in: loss``), each a sum
    over its policy tokens / ``n_tok``. -> its old log-probs and correction weights (b, w)."""
    p, c, m = cfg.ppo, cfg.correction, sub.policy_mask
    out = learner.forward(learner.model, sub, temperature=cfg.rollout.temperature,
                          values=sub.returns is not None, entropy_grad=p.entropy_coef > 0)
    old_lp = out.logprobs.detach() if sub.old_logp is None else sub.old_logp
    weights = correction_weights(old_lp, sub.behaviour_logp, m, mode=c.mode, threshold=c.threshold,
                                 lo=c.lo, hi=c.hi, geo_band=(c.geo_band[0], c.geo_band[1]))
    assert sub.advantages is not None, "compute_advantages(...) comes before ppo_update(...)"
    pg, ps = ppo_policy_loss(out.logprobs, old_lp, sub.advantages, m, clip_low=p.clip_low,
                             clip_high=p.clip_high, weights=weights, denom=n_tok)
    ent = masked_mean(out.entropy, m, n_tok)
    loss = pg - p.entropy_coef * ent if p.entropy_coef else pg
    if sub.returns is not None and out.values is not None:
        old_v = out.values.detach() if sub.old_values is None else sub.old_values
        vl = value_loss(out.values, old_v, sub.returns, m, clip=p.value_clip, denom=n_tok)
        loss = loss + p.value_coef * vl
        st.add("value_loss", vl.item())
    if sub.ref_logp is not None:
        est = _estimator(cfg)
        kl = masked_mean(kl_estimate(out.logprobs, sub.ref_logp, est), m, n_tok)
        watched = kl if est == "k3" else masked_mean(kl_estimate(out.logprobs.detach(), sub.ref_logp, "k3"), m, n_tok)
        st.add("kl_ref", watched.item())  # the health monitor's k3, whatever the loss's estimator
        if p.kl_in == "loss" and kl_coef > 0:
            loss = loss + kl_coef * kl
    check_finite("loss", loss.detach(), step, "Lower ppo.lr, check rewards, or enable "
                 "rollout correction (correction.mode).")
    if loss.requires_grad:  # a micro-batch without policy tokens (all masked) has no graph
        (loss * learner.ranks.world).backward()  # FSDP averages gradients over the ranks: undo it
    n = ps["n_tokens"]
    st.add("pg_loss", pg.item())
    st.add("entropy", ent.item())
    st.add("loss", loss.item())
    for key in ("ratio_mean", "clip_frac", "approx_kl"):
        st.add(key, ps[key] * n)
    st.top("ratio_max", ps["ratio_max"] if n else -math.inf)  # same keys on every rank
    st.top("neg_ratio_min", -ps["ratio_min"] if n else -math.inf)
    return old_lp, weights


def _estimator(cfg: TrainConfig) -> Literal["k1", "k2", "k3"]:
    return cast(Literal["k1", "k2", "k3"], cfg.ppo.kl_estimator)  # one of them: the config checked it


def _optimizer_step(learner: Learner, max_grad_norm: float, step: int, st: _Stats, n_tok: float) -> dict[str, float]:
    """Clip the accumulated gradient, step AdamW and the schedule -> the minibatch's metrics."""
    params = [q for q in learner.params if q.grad is not None]
    gn = torch.nn.utils.clip_grad_norm_(params, max_grad_norm or math.inf)
    gn = gn.full_tensor() if hasattr(gn, "full_tensor") else gn
    check_finite("grad norm", gn.detach(), step, "Lower ppo.lr or ppo.max_grad_norm.")
    learner.optimizer.step()
    learner.scheduler.step()
    r = st.reduce()
    for key in ("ratio_mean", "clip_frac", "approx_kl"):
        r[key] = r[key] / max(n_tok, 1.0)
    r["ratio_min"] = -r.pop("neg_ratio_min")
    for key in ("ratio_min", "ratio_max"):  # no policy token at all: report 1
        r[key] = r[key] if math.isfinite(r[key]) else 1.0
    r.update(grad_norm=float(gn), adam_step_rms=adam_step_rms(learner.optimizer))
    return r


