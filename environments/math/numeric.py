"""Equality decided by mpmath alone, when its numbers can be trusted: the step before sympy.

Most answers that reach the verifier's expression engine are settled by their values: a wrong
answer differs at the first test point, a right one agrees at every point. Building the same
expressions in sympy costs milliseconds on first sight; evaluating them with mpmath costs
tens of microseconds. :func:`decide` returns a verdict only when the values justify it, and
None otherwise (then sympy's exact test and its adaptive evalf decide, as before):

* **unequal** when at some point the sides differ by more than ``1e-10`` relative, and that
  difference is *stable*: computed at 30 and at 50 digits it agrees to three digits, so no
  cancellation produced it (a rounding artefact changes with the precision).
* **equal** when at the points (one for constants, four with variables) the sides agree to
  ``1e-40`` relative at 50 digits, *and* every intermediate value stayed within
  ``[1e-10, 1e10]`` in magnitude (zeros aside): no term large enough to hide, or small enough
  to be, a difference below the 40th digit. Huge or tiny intermediates (``(sqrt 2 + sqrt 3)^200
  + 1``, ``e^x + 10^-25``) go to sympy, whose exact test proves a nonzero rational difference.
* with ``+ C`` the differences must agree with each other instead (any antiderivative);
  with a decimal reference (``places``) one evaluation is compared to its rounding.

This is the random-point test sympy's ``Expr.equals`` falls back to, at a tighter tolerance
and with a guard on what fixed precision can see.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from agentgym.environments.math.expr import ExprError, Node, TooLarge, eval_mp, eval_mp_span, mp_context

__all__ = ["decide"]

EQUAL_TOL = 40  # decimal digits of relative agreement that make "equal"
UNEQUAL_TOL = 1e-10  # relative difference beyond which a stable difference is "unequal"
SPAN = 33  # 2**33 ~ 1e10: intermediate magnitudes the equal verdict may rely on


def _values(node: Node, env: dict[str, Fraction], dps: int) -> tuple[Any, int, int]:
    return _cached_values(node, tuple(sorted(env.items())), dps, threading.get_ident())


@functools.lru_cache(maxsize=8192)
def _cached_values(node: Node, point: tuple[tuple[str, Fraction], ...], dps: int,
                   thread: int) -> tuple[Any, int, int]:
    # Cached: a task's reference meets many answers at the same points. Per thread, because
    # mpmath values belong to the thread's own context.
    ctx = mp_context(dps)
    return eval_mp_span(node, {s: ctx.mpf(v.numerator) / v.denominator for s, v in point}, dps)


def _d30(pn: Node, rn: Node, env: dict[str, Fraction]) -> Any:
    """The difference of the sides at 30 digits (to tell a real difference from rounding)."""
    ctx = mp_context(30)
    e = {s: ctx.mpf(v.numerator) / v.denominator for s, v in env.items()}
    return eval_mp(pn, e, 30) - eval_mp(rn, e, 30)


def _stable(d50: Any, d30: Any) -> bool:
    return bool(abs(d30 - d50) <= abs(d50) * 1e-3)


def decide(pn: Node, rn: Node, points: Iterable[dict[str, Fraction]], *, needed: int,
           has_c: bool = False, places: int | None = None) -> bool | None:
    """True (equal), False (unequal) or None (not decidable from fixed-precision values)."""
    ctx = mp_context(50)
    agreed = 0
    first: tuple[Any, dict[str, Fraction]] | None = None  # + C: the first point's difference
    for env in points:
        try:
            a, alo, ahi = _values(pn, env, 50)
            b, blo, bhi = _values(rn, env, 50)
        except TooLarge:
            return None  # the guarded path raises it with its reason
        except (ExprError, ZeroDivisionError, ValueError, OverflowError):
            continue  # undefined here: try the next point
        tame = min(alo, blo) >= -SPAN and max(ahi, bhi) <= SPAN
        scale = max(ctx.mpf(1), abs(a), abs(b))
        diff = a - b
        try:
            if places is not None:  # a decimal reference: its rounding decides, once
                half = ctx.mpf(10) ** (-places) / 2
                if abs(abs(diff) - half) <= scale * ctx.mpf(10) ** -25:
                    return None
                if not (tame or _stable(diff, _d30(pn, rn, env))):
                    return None
                return bool(abs(diff) <= half)
            if has_c:
                if first is None:
                    first, agreed = (diff, env), 1
                    continue
                gap = diff - first[0]
                if abs(gap) <= scale * ctx.mpf(10) ** -EQUAL_TOL:
                    if not tame:
                        return None
                    agreed += 1
                elif abs(gap) > scale * UNEQUAL_TOL and _stable(gap, _d30(pn, rn, env) - _d30(pn, rn, first[1])):
                    return False
                else:
                    return None
            elif abs(diff) <= scale * ctx.mpf(10) ** -EQUAL_TOL:
                if not tame:
                    return None
                agreed += 1
            elif abs(diff) > scale * UNEQUAL_TOL and _stable(diff, _d30(pn, rn, env)):
                return False
            else:
                return None  # a small difference, or an unstable one: sympy's exact test decides
        except (ExprError, ZeroDivisionError, ValueError, OverflowError, TooLarge):
            return None
        if agreed >= needed:
            return True
    return None
