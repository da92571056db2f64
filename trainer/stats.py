"""Paired success statistics of evaluations: per-problem rates, pass@k, and the gain between two
evaluations of the same problems with its standard error. Also the arms' display names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["ARM_NAMES", "gain", "pass_at_k", "per_problem"]


ARM_NAMES = {"ppo": "PPO", "placebo": "placebo", "rft": "RFT", "raft": "best-of-group", "sft": "SFT"}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples with ``c`` successes (Chen et al.,
    2021): 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _chunks(outcomes: str, samples: int) -> list[str]:
    s = max(samples, 1)
    return [outcomes[i:i + s] for i in range(0, len(outcomes) - s + 1, s)]


def per_problem(outcomes: str, samples: int, *, any_of: bool = False) -> list[float | None]:
    """Per-problem success rates from a problem-major 0/1 string of ``samples`` per problem
    (``any_of``: 1 if any of them succeeded, pass@samples); ``-`` marks a lost episode, and a
    problem whose every episode was lost is None."""
    rates: list[float | None] = []
    for chunk in _chunks(outcomes, samples):
        c = chunk.replace("-", "")
        rates.append(None if not c else float("1" in c) if any_of else c.count("1") / len(c))
    return rates


def _se(xs: Sequence[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mu = sum(xs) / n
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (n - 1) / n)


def gain(before: dict[str, Any], after: dict[str, Any], prefix: str = "", *,
         pass_at_k: bool = False) -> dict[str, float] | None:
    """after - before success on the same problems, paired problem by problem: the mean of the
    per-problem differences, its standard error (``se``), the unpaired one (``se_unpaired``, a
    conservative bound) and ``z`` = gain / se. None when the two are not the same problems.
    ``pass_at_k``: of pass@k instead, k the samples per problem (both must have the same k)."""
    a, b = before.get(prefix + "outcomes"), after.get(prefix + "outcomes")
    if not a or not b:
        return None
    sa, sb = int(before.get(prefix + "samples", 1)), int(after.get(prefix + "samples", 1))
    ha, hb = before.get(prefix + "problems_hash"), after.get(prefix + "problems_hash")
    pa, pb = per_problem(a, sa, any_of=pass_at_k), per_problem(b, sb, any_of=pass_at_k)
    if (not pa or len(pa) != len(pb) or (ha is not None and hb is not None and ha != hb)
            or (pass_at_k and sa != sb)):
        return None
    both = [(x, y) for x, y in zip(pa, pb) if x is not None and y is not None]  # paired by problem
    if not both:
        return None
    d = [y - x for x, y in both]
    n = len(d)
    mean = sum(d) / n
    se = _se(d)
    se_unpaired = math.sqrt(_se([x for x, _ in both]) ** 2 + _se([y for _, y in both]) ** 2)
    z = mean / se if se > 0 else (math.inf if mean > 0 else (-math.inf if mean < 0 else 0.0))
    return {"gain": mean, "se": se, "se_unpaired": se_unpaired, "z": z, "problems": float(n)}


