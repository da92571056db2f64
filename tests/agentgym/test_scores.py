"""The one success rule and the one Wilson interval (``agentgym.scores``)."""

from __future__ import annotations

import math
import statistics

import pytest

from agentgym.scores import SOLVED, Z95, solved, wilson


def test_an_episode_succeeds_when_its_outcome_is_one() -> None:
    assert solved(1.0) and solved(1.0 - 1e-12)  # float noise of a 1
    assert not solved(0.0) and not solved(0.5) and not solved(0.999)  # partial credit is no success
    assert 0.999 < SOLVED < 1.0


def test_z95_is_the_two_sided_95_percent_normal_quantile() -> None:
    assert Z95 == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-15)


def test_wilson_known_values_and_the_ends() -> None:
    lo, hi = wilson(0.5, 100)
    assert math.isclose(lo, 0.4038, abs_tol=1e-4) and math.isclose(hi, 0.5962, abs_tol=1e-4)
    lo, hi = wilson(0.0, 256)
    assert lo == 0.0 and 0 < hi < 0.02
    lo, hi = wilson(1.0, 256)
    assert 0.98 < lo < 1.0 and hi == 1.0
    lo, hi = wilson(0.5, 256)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 256), rel=0.02)
    assert wilson(0.3, 0) == (0.0, 1.0) and wilson(0.3, -1.0) == (0.0, 1.0)  # nothing observed
    lo, hi = wilson(0.25, 12.5)  # an effective sample size may be fractional
    assert 0 < lo < 0.25 < hi < 1


def test_every_rate_lies_inside_its_interval_to_the_last_bit() -> None:
    # 24/24 once gave hi 0.9999999999999999, and a plot's error bar (hi - rate) went negative
    for n in range(1, 300):
        for k in range(n + 1):
            lo, hi = wilson(k / n, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
