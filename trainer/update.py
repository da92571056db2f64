"""One PPO update on a batch: epochs x minibatches, each minibatch as micro-batches.

    metrics = ppo_update(setup, cfg, batch, step, reward_std=...)

Memory is bounded by ``ppo.micro_batch_tokens``, not by the batch: a minibatch's rows are cut
into micro-batches of at most that many padded tokens (rows of similar length together,
:func:`~agentgym.trainer.batch.micro_batches`), each does its forward and backward, and the
gradients accumulate. Every loss term is a sum over the micro-batch's policy tokens divided
by the policy-token count of the whole minibatch on all ranks, so the accumulated gradient is
the full minibatch's token mean whatever the split (tested against one single-batch pass).

Rewards. The outcome scores of all ranks are gathered; ``ppo.placebo`` permutes them
(:func:`placebo_permutation`, seeded by (seed, step)) before anything else, and the permuted
return sits on each episode's last policy token. ``kl_in: reward`` then subtracts the KL
penalty: per token for GAE; after the group normalisation of the outcome scores for the group
baseline (:func:`~agentgym.trainer.ppo.group_advantages_with_kl`).

Old log-probs. With one epoch and one minibatch every micro-batch's old log-probs are the
detached log-probs of its own differentiated pass (ratio exactly 1). Otherwise, and when the
KL goes into the reward (the group baseline then needs every episode's penalty first), a
no-grad pass over the *same* micro-batches gives them before the update; on CPU it is
bitwise equal to the first epoch's differentiated pass, so the first minibatch's ratio is
still exactly 1. Correction weights and GAE are per sequence and computed per micro-batch;
the group baseline is global (all ranks' scores).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from agentgym.errors import NonFiniteError
from agentgym.trainer.batch import Batch, micro_batches, prefix_forward
from agentgym.trainer.correction import correction_weights, mismatch_stats
from agentgym.trainer.distributed import all_gather_rows, all_reduce_sum
from agentgym.trainer.ppo import (
    gae,
    group_advantages,
    group_advantages_with_kl,
    kl_estimate,
    kl_reward_penalty,
    masked_mean,
    ppo_policy_loss,
    value_loss,
)

__all__ = ["adam_step_rms", "check_finite", "mismatch_by_staleness", "placebo_permutation", "ppo_update"]


def check_finite(name: str, x: torch.Tensor, step: int, hint: str) -> None:
    """Raise :class:`NonFiniteError` if ``x`` holds NaN or inf (before anything is written)."""
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NonFiniteError(f"step {step}: {bad} non-finite value(s) in {name}; expected finite "
                             f"numbers. {hint} No checkpoint was written for this step.")


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


def _forward(s: Any, model: torch.nn.Module, b: Batch, *, temperature: float, values: bool,
             entropy: bool = True, entropy_grad: bool = False) -> Any:
    from agentgym.trainer.routing import replay_batch

    with s.compute(), replay_batch(model, b.routes):  # routing replay (R3) when the batch has routes
        return prefix_forward(model, b, temperature=temperature, value_head=s.value_head if values else None,
                              with_entropy=entropy, entropy_grad=entropy_grad)


@torch.no_grad()
def _no_grad_pass(s: Any, model: torch.nn.Module, b: Batch, plan: list[torch.Tensor], *,
                  temperature: float, values: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and values) of every row, micro-batch by micro-batch -> (B, T) tensors."""
    logp = torch.zeros_like(b.behaviour_logp)
    vals = torch.zeros_like(b.behaviour_logp) if values else None
    for rows in plan:
        sub = b.select(rows)
        out = _forward(s, model, sub, temperature=temperature, values=values, entropy=False)
        w = sub.input_ids.shape[1]
        logp[rows, :w] = out.logprobs.float()
        if vals is not None and out.values is not None:
            vals[rows, :w] = out.values.float()
    return logp, vals


def placebo_permutation(n: int, seed: int, step: int) -> torch.Tensor:
    """The placebo arm's shuffle of one step's ``n`` episodes (all ranks'): a pure function of
    (seed, step), the same on every rank."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 15485863 + step * 7 + 3))


def _on_last_policy_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) returns -> (B, T) rewards: each row's return on its last policy token."""
    out = torch.zeros_like(mask, dtype=torch.float32)
    cols = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), cols, torch.full_like(cols, -1)).max(-1).values  # (B,)
    has = last >= 0
    out[has.nonzero().flatten(), last[has]] = scores[has].float()
    return out


def adam_step_rms(optimizer: torch.optim.Optimizer) -> float:
    """RMS of AdamW's step direction ``m_hat / (sqrt(v_hat) + eps)`` (in units of lr) over the
    elements that had a gradient in the step just taken; all ranks together."""
    total, count = 0.0, 0.0
    for g in optimizer.param_groups:
        b1, b2 = g["betas"]
        for p in g["params"]:
            st = optimizer.state.get(p)
            if p.grad is None or not st or "exp_avg" not in st:
                continue
            local = (lambda t: t.to_local() if hasattr(t, "to_local") else t)  # noqa: E731
            t = float(st["step"])
            m, v, grad = local(st["exp_avg"]), local(st["exp_avg_sq"]), local(p.grad)
            u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + g["eps"])
            hit = grad != 0
            total += float(u[hit].double().pow(2).sum())
            count += float(hit.sum())
    total, count = all_reduce_sum(total), all_reduce_sum(count)
    return math.sqrt(total / count) if count else 0.0


def ppo_update(s: Any, cfg: Any, b: Batch, step: int,
               reward_std: Callable[[torch.Tensor], float] | None = None) -> dict[str, float]:
    """The update of PPO step ``step`` on this rank's rows ``b`` (module doc). ``s`` is the
    run's :class:`~agentgym.trainer.train.Setup`; ``reward_std`` maps this step's scores of all
    ranks to the running std that divides them (``ppo.normalize_rewards``)."""
    p, c, T = cfg.ppo, cfg.correction, cfg.rollout.temperature
    world = s.dist.world if s.dist is not None else 1
    B, mask = len(b), b.policy_mask
    gae_mode = p.advantage == "gae"

    def plan(rows: torch.Tensor) -> list[torch.Tensor]:
        return micro_batches(b.lengths, rows, p.micro_batch_tokens)

    everything = plan(torch.arange(B))
    exact = p.epochs == 1 and p.minibatches == 1
    ref_logp = None
    if s.ref_model is not None:
        ref_logp, _ = _no_grad_pass(s, s.ref_model, b, everything, temperature=T, values=False)
    kl_reward = ref_logp is not None and p.kl_in == "reward"
    pre = _no_grad_pass(s, s.model, b, everything, temperature=T, values=gae_mode) if (
        not exact or kl_reward) else None

    metrics: dict[str, float] = {}
    rewards, scores = b.rewards.clone(), b.scores.clone()  # outcome: (B, T) per turn, (B,) returns
    all_scores = all_gather_rows(scores)  # (N,) every rank's episodes, in rank order
    offset = _rows_before(B) if world > 1 else 0
    if p.placebo:  # the control: each episode learns from another episode's return
        all_scores = all_scores[placebo_permutation(len(all_scores), cfg.seed, step)]
        scores = all_scores[offset:offset + B]
        rewards = _on_last_policy_token(scores, mask)
    if reward_std is not None:
        std = reward_std(all_gather_rows(b.scores))
        rewards, scores, all_scores = rewards / std, scores / std, all_scores / std
    check_finite("rewards", all_scores, step, "Check the environment's rewards and shaping.")
    pen = None
    if kl_reward:
        assert pre is not None and ref_logp is not None
        pen = kl_reward_penalty(pre[0], ref_logp, mask, coef=p.kl_coef, estimator=p.kl_estimator)  # (B, T)
        rewards -= pen
        n_all = all_reduce_sum(float(mask.sum()))
        metrics["kl_reward"] = all_reduce_sum(float(pen.sum())) / max(n_all, 1.0) / p.kl_coef
    seq_adv = None
    if not gae_mode:
        groups = all_gather_rows(b.group_ids + 0)  # global task ids: ranks hold disjoint tasks
        if pen is None:
            seq_adv = group_advantages(all_scores, groups, normalize_std=p.group_std_normalize)
        else:  # normalise the outcome first, then the (centred) KL penalty
            seq_adv = group_advantages_with_kl(all_scores, all_gather_rows(pen.sum(-1)), groups,
                                               normalize_std=p.group_std_normalize)
        seq_adv = seq_adv[offset:offset + B]
        check_finite("advantages", seq_adv, step, "Check rewards.")

    old_full = torch.zeros_like(b.behaviour_logp)  # the old log-probs and weights, for mismatch stats
    w_full = torch.zeros_like(b.behaviour_logp)
    gen = torch.Generator().manual_seed(cfg.seed * 104729 + step)
    acc: dict[str, list[float]] = {}
    for epoch in range(p.epochs):
        order = torch.randperm(B, generator=gen) if p.minibatches > 1 else torch.arange(B)
        for mb in order.chunk(p.minibatches):
            n_tok = all_reduce_sum(float(mask[mb].sum()))  # policy tokens of the minibatch, all ranks
            st = _Stats()
            s.optimizer.zero_grad(set_to_none=True)
            for rows in plan(mb):
                sub = b.select(rows)
                w, m = sub.input_ids.shape[1], sub.policy_mask
                out = _forward(s, s.model, sub, temperature=T, values=gae_mode, entropy_grad=p.entropy_coef > 0)
                old_lp = out.logprobs.detach() if pre is None else pre[0][rows, :w]
                weights = correction_weights(old_lp, sub.behaviour_logp, m, mode=c.mode, threshold=c.threshold,
                                             lo=c.lo, hi=c.hi, geo_band=tuple(c.geo_band))
                if epoch == 0:
                    old_full[rows, :w], w_full[rows, :w] = old_lp, weights
                returns = old_v = None
                if gae_mode:
                    assert out.values is not None
                    old_v = out.values.detach() if pre is None or pre[1] is None else pre[1][rows, :w]
                    last = old_v.gather(1, sub.lengths[:, None]).squeeze(1)  # V after the last token
                    boot = torch.where(sub.truncated, last, torch.zeros_like(last))
                    adv, returns = gae(rewards[rows, :w], old_v, m, gamma=p.gamma, lam=p.lam, bootstrap=boot)
                    check_finite("advantages", adv, step, "Check rewards and the value head.")
                else:
                    assert seq_adv is not None
                    adv = seq_adv[rows][:, None] * m  # (b, w): one advantage per episode
                pg, ps = ppo_policy_loss(out.logprobs, old_lp, adv, m, clip_low=p.clip_low,
                                         clip_high=p.clip_high, weights=weights, denom=n_tok)
                loss = pg
                ent = masked_mean(out.entropy, m, n_tok)
                if p.entropy_coef:
                    loss = loss - p.entropy_coef * ent
                if returns is not None and out.values is not None and old_v is not None:
                    vl = value_loss(out.values, old_v, returns, m, clip=p.value_clip, denom=n_tok)
                    loss = loss + p.value_coef * vl
                    st.add("value_loss", vl.item())
                if ref_logp is not None:
                    kl = masked_mean(kl_estimate(out.logprobs, ref_logp[rows, :w], p.kl_estimator), m, n_tok)
                    st.add("kl_ref", kl.item())
                    if p.kl_in == "loss":
                        loss = loss + p.kl_coef * kl
                check_finite("loss", loss.detach(), step, "Lower ppo.lr, check rewards, or enable "
                             "rollout correction (correction.mode).")
                if loss.requires_grad:  # a micro-batch without policy tokens (all masked) has no graph
                    (loss * world).backward()  # FSDP averages gradients over the ranks: undo it
                n = ps["n_tokens"]
                st.add("pg_loss", pg.item())
                st.add("entropy", ent.item())
                st.add("loss", loss.item())
                for key in ("ratio_mean", "clip_frac", "approx_kl"):
                    st.add(key, ps[key] * n)
                st.top("ratio_max", ps["ratio_max"] if n else -math.inf)  # same keys on every rank
                st.top("neg_ratio_min", -ps["ratio_min"] if n else -math.inf)
            params = [q for q in s.params if q.grad is not None]
            gn = torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm or math.inf)
            gn = gn.full_tensor() if hasattr(gn, "full_tensor") else gn
            check_finite("grad norm", gn.detach(), step, "Lower ppo.lr or ppo.max_grad_norm.")
            s.optimizer.step()
            s.scheduler.step()
            r = st.reduce()
            for key in ("ratio_mean", "clip_frac", "approx_kl"):
                r[key] = r[key] / max(n_tok, 1.0)
            r["ratio_min"] = -r.pop("neg_ratio_min")
            for key in ("ratio_min", "ratio_max"):  # no policy token at all: report 1
                r[key] = r[key] if math.isfinite(r[key]) else 1.0
            r.update(grad_norm=float(gn), adam_step_rms=adam_step_rms(s.optimizer))
            for key, v in r.items():
                acc.setdefault(key, []).append(float(v))
    out_stats = {k: sum(v) / len(v) for k, v in acc.items()}
    for key in ("ratio_min", "ratio_max", "clip_frac"):
        out_stats[f"{key}_first"] = acc[key][0]
    out_stats["ratio_max"], out_stats["ratio_min"] = max(acc["ratio_max"]), min(acc["ratio_min"])
    out_stats.update(metrics, micro_batches=float(len(everything)))
    old_all, beh_all, mask_all, w_all = (all_gather_rows(x) for x in (old_full, b.behaviour_logp, mask, w_full))
    out_stats.update({f"mismatch_{k}": v for k, v in mismatch_stats(
        old_all, beh_all, mask_all, w_all, threshold=c.threshold, mode=c.mode).items()})
    if cfg.rollout.mode == "async" and b.versions is not None and world == 1:
        out_stats.update(mismatch_by_staleness(old_full, b.behaviour_logp, mask, w_full, b.versions, step,
                                               cfg.rollout.max_staleness, threshold=c.threshold, mode=c.mode))
    return out_stats


BY_STALENESS = ("k3", "abs_dlogp_mean", "ess", "capped_frac", "n_tokens")


def mismatch_by_staleness(old: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
                          versions: torch.Tensor, step: int, max_staleness: int, *, threshold: float,
                          mode: str) -> dict[str, float]:
    """``mismatch_<key>_s<j>`` for the policy tokens sampled ``j`` versions before ``step``
    (j = 0..max_staleness; keys in ``BY_STALENESS``): how far engine and learner drift apart,
    and how hard correction works, as a function of the tokens' age."""
    out: dict[str, float] = {}
    age = step - versions.to(mask.device)
    for j in range(max_staleness + 1):
        mj = mask * ((age == j) & (versions >= 0)).to(mask.dtype)
        stats = mismatch_stats(old, behaviour, mj, weights, threshold=threshold, mode=mode)
        out.update({f"mismatch_{k}_s{j}": stats[k] for k in BY_STALENESS if k in stats})
    return out


def _rows_before(n_local: int) -> int:
    """How many rows the ranks before this one hold (its offset in rank-ordered gathers)."""
    import torch.distributed as dist

    counts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(counts, n_local)
    return sum(int(x) for x in counts[: dist.get_rank()])
