"""Rollout correction: importance weights between the engine that sampled and the trainer.

Three policies meet in one PPO step: the *behaviour* policy (the engine's log-probs, as
sampled), the *old/proximal* policy (the trainer's log-probs before the update) and the
current policy being optimised. Engine and trainer never agree exactly (kernels, precision,
batching), so the surrogate loss is reweighted per token by ``w_t``, computed from

    log rho_t = clamp(log pi_old(a_t) - log pi_behaviour(a_t), -clamp, +clamp)

over *policy tokens* (``mask == 1``). With C = ``threshold``:

=============  ==============================================================================
``none``       w_t = 1
``token_tis``  w_t = min(rho_t, C)                        truncated IS, per token
``seq_tis``    w   = min(prod_t rho_t, C)                 same w for all tokens of a sequence
``token_mis``  w_t = rho_t if rho_t <= C else 0           masked IS, per token
``seq_mis``    w   = prod_t rho_t if prod_t rho_t <= C else 0  (whole sequence dropped)
``geo_mask``   w   = 1 if band[0] <= exp(mean_t log rho_t) <= band[1] else 0
=============  ==============================================================================

These follow verl's rollout correction (``docs/algo/rollout_corr_math.md``): Token-TIS,
Seq-TIS, Seq-MIS ("rejects sequences with rho > C instead of clipping": no lower bound, so a
long multi-turn episode whose tiny per-token deviations multiply to a small ratio is kept
with that small weight) and Geo-RS (the geometric mean: long sequences are not dropped
merely for being long).

A weight rule and the geometric mask combine with ``+``: ``token_tis+geo_mask`` is verl's
Geo-RS-Token-TIS (``rollout_is=token`` + ``rollout_rs=seq_mean_k1``), ``seq_tis+geo_mask``
likewise; at most one weight rule and one mask. Extensions beyond verl's definitions, both
off by default: ``hi`` replaces C as Seq-MIS's upper bound, and ``lo`` adds a lower bound to
Seq-MIS (verl expresses the same with a ``"lower_upper"`` rejection threshold).

Weights are detached and zero outside ``mask``. :func:`mismatch_stats` gives the
diagnostics logged every step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agentgym.errors import ConfigError

from .correction_modes import CORRECTION_MODES, MASKS, parse_mode

__all__ = ["BY_STALENESS", "CORRECTION_MODES", "MASKS", "correction_weights", "mismatch_by_staleness", "mismatch_stats",
           "parse_mode"]

_Rule = Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor]


def _seq_log_ratio(log_rho: torch.Tensor, m: torch.Tensor, clamp: float) -> torch.Tensor:
    """sum_t log rho_t per sequence, clamped -> (B, 1)."""
    return (log_rho * m).sum(-1, keepdim=True).clamp(-clamp, clamp)


def _none(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    return torch.ones_like(log_rho)


def _token_tis(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    return torch.exp(log_rho).clamp(max=o["threshold"])


def _seq_tis(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    w = torch.exp(_seq_log_ratio(log_rho, m, o["clamp"])).clamp(max=o["threshold"])  # (B, 1)
    return w.expand_as(log_rho)


def _token_mis(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    rho = torch.exp(log_rho)
    return torch.where(rho <= o["threshold"], rho, torch.zeros_like(rho))


def _seq_mis(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    hi = o["threshold"] if o["hi"] is None else o["hi"]
    prod = torch.exp(_seq_log_ratio(log_rho, m, o["clamp"]))  # (B, 1)
    keep = prod <= hi
    if o["lo"] is not None:  # extension: verl's Seq-MIS has no lower bound
        keep &= prod >= o["lo"]
    return torch.where(keep, prod, torch.zeros_like(prod)).expand_as(log_rho)


def _geo_mask(log_rho: torch.Tensor, m: torch.Tensor, o: dict) -> torch.Tensor:
    lo, hi = o["geo_band"]
    n = m.sum(-1, keepdim=True).clamp(min=1.0)
    geo = torch.exp((log_rho * m).sum(-1, keepdim=True) / n)  # (B, 1) geometric mean of rho
    keep = (geo >= lo) & (geo <= hi)
    return keep.to(log_rho.dtype).expand_as(log_rho)


_RULES: dict[str, _Rule] = {
    "none": _none,
    "token_tis": _token_tis,
    "seq_tis": _seq_tis,
    "token_mis": _token_mis,
    "seq_mis": _seq_mis,
    "geo_mask": _geo_mask,
}
assert set(_RULES) == set(CORRECTION_MODES)  # one rule per named mode (correction_modes.py)


@torch.no_grad()
def correction_weights(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    threshold: float = 2.0,
    lo: float | None = None,
    hi: float | None = None,
    geo_band: tuple[float, float] = (0.999, 1.001),
    clamp: float = 20.0,
) -> torch.Tensor:
    """Per-token importance weights (B, T), detached, zero where ``mask`` is 0 (module doc)."""
    parts = parse_mode(mode)
    if threshold <= 0:
        raise ConfigError(f"correction threshold must be > 0, got {threshold}")
    m = mask.to(torch.float32)
    log_rho = ((old_logp.float() - behaviour_logp.float()) * m).clamp(-clamp, clamp)
    opts = {"threshold": threshold, "lo": lo, "hi": hi, "geo_band": geo_band, "clamp": clamp}
    w = m
    for part in parts:  # a weight rule times a 0/1 mask
        w = w * _RULES[part](log_rho, m, opts)
    return w.detach()


@torch.no_grad()
def mismatch_stats(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    threshold: float = 2.0,
    clamp: float = 20.0,
    mode: str | None = None,
) -> dict[str, float]:
    """Engine-vs-trainer mismatch diagnostics over policy tokens.

    Keys: ``abs_dlogp_mean``/``abs_dlogp_max`` (|log pi_old - log pi_b|), ``k1`` =
    mean(log pi_b - log pi_old), ``k3`` = mean(rho - log rho - 1) (both estimate
    KL(behaviour || old) from the engine's samples), ``log_ppl_diff_mean`` (mean over sequences
    of log-ppl_old - log-ppl_b, signed) and ``log_ppl_diff_max`` (largest absolute one),
    ``w_mean/w_std/w_min/w_max`` and ``ess`` = 1 / mean((w / mean w)^2) in (0, 1] over policy
    tokens, ``masked_token_frac`` (policy tokens with w = 0), ``masked_seq_frac`` (sequences
    with every weight 0), ``truncated_frac`` (policy tokens with rho_t > threshold) and
    ``seq_truncated_frac`` (sequences with prod rho > threshold), ``capped_frac`` (policy tokens
    whose weight the rule limited: at the cap C, or set to 0 by a mask; a correction that caps
    most tokens reweights nothing: a uniform C is a learning-rate change; 0 when ``mode`` is
    ``"none"``), ``n_tokens``, ``n_seqs``.
    """
    m = mask.to(torch.bool)
    mf = m.float()
    seq_has = m.any(-1)  # (B,) sequences that have policy tokens
    n_tok = int(m.sum())
    n_seq = int(seq_has.sum())
    if n_tok == 0:
        return {"n_tokens": 0.0, "n_seqs": 0.0}
    d = (old_logp.float() - behaviour_logp.float()) * mf  # log rho, (B, T)
    log_rho = d.clamp(-clamp, clamp)
    rho = torch.exp(log_rho)
    w = mf if weights is None else weights.float()
    wt = w[m]
    n_per_seq = mf.sum(-1).clamp(min=1.0)
    ppl_diff = (-(d.sum(-1)) / n_per_seq)[seq_has]  # log-ppl_old - log-ppl_b per sequence
    seq_log = (log_rho.sum(-1)).clamp(-clamp, clamp)[seq_has]
    w_mean = wt.mean()
    wn = wt / w_mean if float(w_mean) > 0 else torch.zeros_like(wt)
    ess = 1.0 / float((wn**2).mean()) if float(w_mean) > 0 else 0.0
    seq_all_zero = ((w * mf).abs().sum(-1) == 0)[seq_has]
    return {
        "abs_dlogp_mean": float(d[m].abs().mean()),
        "abs_dlogp_max": float(d[m].abs().max()),
        "k1": float((-d)[m].mean()),
        "k3": float((rho - log_rho - 1.0)[m].mean()),
        "log_ppl_diff_mean": float(ppl_diff.mean()),
        "log_ppl_diff_max": float(ppl_diff.abs().max()),
        "w_mean": float(w_mean),
        "w_std": float(wt.std(unbiased=False)),
        "w_min": float(wt.min()),
        "w_max": float(wt.max()),
        "ess": ess,
        "masked_token_frac": float((wt == 0).float().mean()),
        "capped_frac": 0.0 if mode == "none" else float(((wt >= threshold * (1 - 1e-6)) | (wt == 0)).float().mean()),
        "masked_seq_frac": float(seq_all_zero.float().mean()),
        "truncated_frac": float((rho[m] > threshold).float().mean()),
        "seq_truncated_frac": float((seq_log.exp() > threshold).float().mean()),
        "n_tokens": float(n_tok),
        "n_seqs": float(n_seq),
    }


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
