"""Rollout-correction weights against their formulas on hand-made tensors, and diagnostics."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.algo.correction import CORRECTION_MODES, correction_weights, mismatch_stats

# Two sequences; the last column of row 0 and the last two of row 1 are not policy tokens.
RHO = torch.tensor([[0.5, 1.0, 3.0, 1.0], [1.2, 1.5, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
BEHAVIOUR = torch.tensor([[-1.0, -2.0, -0.5, -1.0], [-0.3, -0.7, -1.0, -2.0]])
OLD = BEHAVIOUR + torch.log(RHO)


def w(mode: str, **kw: float) -> torch.Tensor:
    return correction_weights(OLD, BEHAVIOUR, MASK, mode=mode, **kw)  # type: ignore[arg-type]


def test_none_is_the_mask() -> None:
    assert torch.equal(w("none"), MASK.float())


def test_token_tis() -> None:
    expected = torch.tensor([[0.5, 1.0, 2.0, 0.0], [1.2, 1.5, 0.0, 0.0]])
    torch.testing.assert_close(w("token_tis", threshold=2.0), expected)


def test_seq_tis() -> None:
    # row 0: prod = 0.5*1*3 = 1.5 (< C) ; row 1: prod = 1.8 -> capped at C = 1.6
    expected = torch.tensor([[1.5, 1.5, 1.5, 0.0], [1.6, 1.6, 0.0, 0.0]])
    torch.testing.assert_close(w("seq_tis", threshold=1.6), expected)


def test_token_mis() -> None:
    expected = torch.tensor([[0.5, 1.0, 0.0, 0.0], [1.2, 1.5, 0.0, 0.0]])
    torch.testing.assert_close(w("token_mis", threshold=2.0), expected)


def test_seq_mis() -> None:
    # prods 1.5 and 1.8: above C = 1.6 row 1 is dropped, row 0 keeps w = prod
    expected = torch.tensor([[1.5, 1.5, 1.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(w("seq_mis", threshold=1.6), expected)
    # explicit bounds: [1.6, 2.0] keeps only row 1
    expected2 = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.8, 1.8, 0.0, 0.0]])
    torch.testing.assert_close(w("seq_mis", lo=1.6, hi=2.0), expected2)


def test_geo_mask() -> None:
    # geometric means: row 0 = 1.5**(1/3) = 1.1447 ; row 1 = 1.8**(1/2) = 1.3416
    expected = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(w("geo_mask", geo_band=(0.9, 1.2)), expected)  # type: ignore[arg-type]
    # the default band (0.999, 1.001) drops both
    assert torch.all(w("geo_mask") == 0)
    # a long sequence of tiny deviations survives although its product is far from 1
    n = 2000
    lr = torch.full((1, n), 0.0005)
    kept = correction_weights(lr, torch.zeros(1, n), torch.ones(1, n), mode="geo_mask")
    assert math.exp(lr.sum().item()) > 2.5 and torch.all(kept == 1)


def test_clamp_keeps_weights_finite_and_detached() -> None:
    old = torch.tensor([[100.0, -100.0]], requires_grad=True)
    beh = torch.zeros(1, 2)
    for mode in CORRECTION_MODES:
        wt = correction_weights(old, beh, torch.ones(1, 2), mode=mode, threshold=1e12)
        assert torch.all(torch.isfinite(wt)) and not wt.requires_grad
    wt = correction_weights(old, beh, torch.ones(1, 2), mode="token_tis", threshold=1e12)
    torch.testing.assert_close(wt, torch.tensor([[math.exp(20.0), math.exp(-20.0)]]))


def test_unknown_mode_suggests() -> None:
    with pytest.raises(ConfigError, match="token_tis"):
        w("token_tiss")


def test_mismatch_stats_hand_made() -> None:
    weights = w("token_tis", threshold=2.0)
    s = mismatch_stats(OLD, BEHAVIOUR, MASK, weights, threshold=2.0)
    lr = torch.log(torch.tensor([0.5, 1.0, 3.0, 1.2, 1.5]))  # policy tokens only
    assert s["n_tokens"] == 5 and s["n_seqs"] == 2
    assert s["abs_dlogp_mean"] == pytest.approx(lr.abs().mean().item(), abs=1e-6)
    assert s["abs_dlogp_max"] == pytest.approx(math.log(3.0), abs=1e-6)
    assert s["k1"] == pytest.approx(-lr.mean().item(), abs=1e-6)
    rho = lr.exp()
    assert s["k3"] == pytest.approx((rho - lr - 1).mean().item(), abs=1e-6)
    # per-sequence log-ppl difference: -(mean log rho) per row
    d0, d1 = -lr[:3].mean().item(), -lr[3:].mean().item()
    assert s["log_ppl_diff_mean"] == pytest.approx((d0 + d1) / 2, abs=1e-6)
    assert s["log_ppl_diff_max"] == pytest.approx(max(abs(d0), abs(d1)), abs=1e-6)
    wt = torch.tensor([0.5, 1.0, 2.0, 1.2, 1.5])
    assert s["w_mean"] == pytest.approx(wt.mean().item(), abs=1e-6)
    assert s["w_std"] == pytest.approx(wt.std(unbiased=False).item(), abs=1e-6)
    assert (s["w_min"], s["w_max"]) == pytest.approx((0.5, 2.0))
    assert s["ess"] == pytest.approx(1 / ((wt / wt.mean()) ** 2).mean().item(), abs=1e-6)
    assert s["truncated_frac"] == pytest.approx(1 / 5)  # only rho = 3 exceeds 2
    assert s["seq_truncated_frac"] == 0.0  # prods 1.5, 1.8
    assert s["masked_token_frac"] == 0.0 and s["masked_seq_frac"] == 0.0
    assert s["capped_frac"] == pytest.approx(1 / 5)  # the token at the cap
    s2 = mismatch_stats(OLD, BEHAVIOUR, MASK, w("seq_mis", threshold=1.6))
    assert s2["masked_seq_frac"] == 0.5 and s2["masked_token_frac"] == pytest.approx(2 / 5)
    assert s2["capped_frac"] == pytest.approx(2 / 5)  # masked tokens count as limited
    s3 = mismatch_stats(OLD, BEHAVIOUR, MASK, w("seq_tis", threshold=1.0), threshold=1.0)
    assert s3["capped_frac"] == 1.0 and s3["ess"] == pytest.approx(1.0)  # saturated: uniform, ESS blind to it
    assert mismatch_stats(OLD, BEHAVIOUR, MASK, w("none"), threshold=0.5, mode="none")["capped_frac"] == 0.0


def test_identical_policies_are_healthy() -> None:
    s = mismatch_stats(BEHAVIOUR, BEHAVIOUR, MASK, w("none"))
    assert s["k1"] == 0.0 and s["k3"] == 0.0 and s["abs_dlogp_max"] == 0.0 and s["ess"] == 1.0


def test_seq_mis_has_no_lower_bound_by_definition() -> None:
    # verl's Seq-MIS rejects a sequence only when prod rho > C; a long episode whose tiny
    # per-token deviations multiply to a small ratio is kept (with its weight prod rho).
    n = 400
    old = torch.full((1, n), -0.004)  # log rho_t = -0.004 -> prod rho = exp(-1.6) = 0.20 < 1/C
    kept = correction_weights(old, torch.zeros(1, n), torch.ones(1, n), mode="seq_mis", threshold=2.0)
    torch.testing.assert_close(kept, torch.full((1, n), math.exp(-1.6)))
    # above C: dropped
    big = correction_weights(torch.full((1, n), 0.004), torch.zeros(1, n), torch.ones(1, n),
                             mode="seq_mis", threshold=2.0)
    assert torch.all(big == 0)
    # an explicit lower bound (an extension, as verl's "lower_upper" rejection spec) still drops it
    lo = correction_weights(old, torch.zeros(1, n), torch.ones(1, n), mode="seq_mis", threshold=2.0, lo=0.5)
    assert torch.all(lo == 0)


def test_token_tis_combines_with_the_geometric_sequence_mask() -> None:
    # verl's Geo-RS-Token-TIS: token weights min(rho_t, C) times the geometric-mean filter
    got = w("token_tis+geo_mask", threshold=2.0, geo_band=(0.9, 1.2))  # type: ignore[arg-type]
    expected = torch.tensor([[0.5, 1.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 1: geo 1.34 dropped
    torch.testing.assert_close(got, expected)
    with pytest.raises(ConfigError, match="at most one"):
        w("token_tis+seq_tis")
