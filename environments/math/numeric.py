"""Equality decided by mpmath alone, when its numbers can be trusted: the step before sympy.

Most answers that reach the verifier's expression engine are settled by their values: a wrong
answer differs at the first test point, a right one agrees at every point. Building the same
expressions in sympy costs milliseconds on first sight; evaluating them with mpmath costs
tens of microseconds. :func:`decide` returns a verdict only when the values justify it, and
None otherwise (then sympy's exact test and its adaptive evalf decide, as before):

* **unequal** when at some point the sides differ by more than ``1e-10`` relative, and that
  difference is *stable*: computed at 30 and at 50 digits it agrees to three digits, so no
  cancellation produced it (a rounding artefact changes with the precision).
* **equal** when at the first point the sides agree to ``1e-40`` relative at 50 digits, *and*
  every intermediate value there stayed within ``[1e-10, 1e10]`` in magnitude (zeros aside):
  no term large enough to hide, or small enough to be, a difference below the 40th digit; and,
  with variables, they also agree at three more points, to ``1e-9`` in machine floats (those
  points only rule out a coincidence at the first; a point where floats disagree is computed
  at 50 digits like the first). Huge or tiny intermediates (``(sqrt 2 + sqrt 3)^200 + 1``,
  ``e^x + 10^-25``) go to sympy, whose exact test proves a nonzero rational difference.
* with ``+ C`` the differences must agree with each other instead (any antiderivative);
  with a decimal reference (``places``) one evaluation is compared to its rounding.

This is the random-point test sympy's ``Expr.equals`` falls back to, at a tighter tolerance
and with a guard on what fixed precision can see.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from agentgym.environments.math.expr import ExprError, Node, TooLarge
from agentgym.environments.math.values import eval_fp, eval_mp, eval_mp_span, mp_context

__all__ = ["decide"]

EQUAL_TOL = 40  # decimal digits of relative agreement that make "equal"
UNEQUAL_TOL = 1e-10  # relative difference beyond which a stable difference is "unequal"
SPAN = 33  # 2**33 ~ 1e10: intermediate magnitudes the equal verdict may rely on
FLOAT_TOL = 1e-9  # agreement in machine floats at the points after the first


def _values(node: Node, env: dict[str, Fraction], dps: int, memo: bool = True) -> tuple[Any, int, int]:
    """The node's value (and span) at a point, memoised by the node's identity and the point.

    A task's reference is one node object (the verifier caches it) met by many answers at the
    same points; keying on ``id`` avoids hashing the tree (Fraction hashes are slow), and the
    entry keeps the node alive so its id cannot be reused while the entry exists. Only the
    reference side is memoised (``memo=False`` for answers): the memo holds trusted nodes only.
    """
    if not memo:
        ctx = mp_context(dps)
        return eval_mp_span(node, {s: ctx.mpf(v.numerator) / v.denominator for s, v in env.items()}, dps)
    key = (id(node), tuple(env.items()), dps, threading.get_ident())
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None and hit[0] is node:
            _MEMO.move_to_end(key)
            return hit[1]
    ctx = mp_context(dps)
    out = eval_mp_span(node, {s: ctx.mpf(v.numerator) / v.denominator for s, v in env.items()}, dps)
    with _MEMO_LOCK:
        _MEMO[key] = (node, out)
        if len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return out


_MEMO: OrderedDict[tuple[Any, ...], tuple[Node, tuple[Any, int, int]]] = OrderedDict()
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 8192


_CONSTANTS: dict[int, tuple[Any, Any]] = {}


def _constants(ctx: Any) -> tuple[Any, Any]:
    """1 and 10**-EQUAL_TOL in this context (an mpf power per comparison adds up)."""
    c = _CONSTANTS.get(id(ctx))
    if c is None:
        c = _CONSTANTS[id(ctx)] = (ctx.mpf(1), ctx.mpf(10) ** -EQUAL_TOL)
    return c


def _float_agree(pn: Node, rn: Node, env: dict[str, Fraction], first_diff: Any) -> bool | None:
    """Do the sides agree to 1e-9 in floats here (with + C: differ by ``first_diff``)?
    None where a side is undefined or a float overflows (then the point is skipped)."""
    e = {s: v.numerator / v.denominator for s, v in env.items()}
    try:
        a, b = eval_fp(pn, e), eval_fp(rn, e)
        d = a - b - (complex(first_diff) if first_diff is not None else 0)
        return bool(abs(d) <= FLOAT_TOL * max(1.0, abs(a), abs(b)))
    except (ExprError, ZeroDivisionError, ValueError, OverflowError, TypeError):
        return None
    except TooLarge:
        return False  # let the 50-digit path raise it with its reason


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
    mp_context(30)  # both contexts are made on the thread's first call (~20 ms each, once)
    one, tol_eq = _constants(ctx)
    agreed = 0
    first: tuple[Any, dict[str, Fraction]] | None = None  # + C: the first point's difference
    for env in points:
        if places is None and agreed >= (2 if has_c else 1):
            # a later point: floats first, 50 digits if they differ ("+ C" needs two 50-digit
            # points: the first fixes the constant, the second checks it to 40 digits)
            screened = _float_agree(pn, rn, env, None if first is None else first[0])
            if screened is None:
                continue  # undefined here
            if screened:
                agreed += 1
                if agreed >= needed:
                    return True
                continue
        try:
            a, alo, ahi = _values(pn, env, 50, memo=False)  # an answer: seen once
            b, blo, bhi = _values(rn, env, 50)  # the reference: met again by the next answer
        except TooLarge:
            return None  # the guarded path raises it with its reason
        except (ExprError, ZeroDivisionError, ValueError, OverflowError):
            continue  # undefined here: try the next point
        tame = min(alo, blo) >= -SPAN and max(ahi, bhi) <= SPAN
        scale = max(one, abs(a), abs(b))
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
                    if not tame:
                        return None
                    first, agreed = (diff, env), 1
                    continue
                gap = diff - first[0]
                if abs(gap) <= scale * tol_eq:
                    if not tame:
                        return None
                    agreed += 1
                elif abs(gap) > scale * UNEQUAL_TOL and _stable(gap, _d30(pn, rn, env) - _d30(pn, rn, first[1])):
                    return False
                else:
                    return None
            elif abs(diff) <= scale * tol_eq:
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
