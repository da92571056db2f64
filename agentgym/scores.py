"""Episode success and the interval of a success rate: the one rule and the one interval that
the trainer's evaluations and the leaderboards share.

**Success.** An episode succeeds when its task outcome is 1 (:func:`solved`: at least
``SOLVED``, 1 up to float noise): the task was solved. A partial outcome (partial credit, such
as an imported scorer's 0.6) counts in mean scores, but it is not a success: success rates,
pass@k, pass^k and the episodes RFT imitates leave it out. For the built-in environments'
outcomes, which are 0 or 1, the rule is the plain one.

**Interval.** :func:`wilson` is Wilson's score interval of a proportion at 95%: it stays inside
[0, 1], is not degenerate at 0% or 100%, and takes a fractional ``n``, so a rate whose samples
are clustered (several per problem or task) is given its interval at the effective sample size.
"""

from __future__ import annotations

import math

__all__ = ["SOLVED", "Z95", "solved", "wilson"]

Z95 = 1.959963984540054  # two-sided 95% normal quantile (statistics.NormalDist().inv_cdf(0.975))
SOLVED = 1.0 - 1e-9  # an outcome this high is 1: the task was solved


def solved(outcome: float) -> bool:
    """The episode whose task outcome is ``outcome`` solved its task (module doc)."""
    return outcome >= SOLVED


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n`` units (``n`` may be an
    effective sample size, so fractional). ``n <= 0`` knows nothing: ``(0, 1)``."""
    if n <= 0:
        return (0.0, 1.0)
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / d
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    # exact at the ends (rounding leaves 1 - 1e-16 at p = 1), and the interval holds p
    return (0.0 if p <= 0 else min(p, lo), 1.0 if p >= 1 else max(p, hi))
