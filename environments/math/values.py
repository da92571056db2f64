"""Values of parsed expressions: exact ``Fraction`` arithmetic and guarded mpmath numbers.

* :func:`eval_exact`: the exact rational value, or :class:`NotRational` when there is none to
  compute cheaply (symbols, pi, a root that is not a perfect power...). A power whose result
  would exceed ``MAX_BITS`` bits is refused before the bignum library sees it
  (``2**2**2**99``, ``10**10**10``); roots, factorials, binomials and logarithms with a base
  are exact when rational (:mod:`.special`).
* :func:`eval_mp` (and ``_real``, ``_span``, ``eval_fp``): numbers in a private mpmath context
  per thread (mpmath's global ``mp`` is shared state), refusing magnitudes beyond
  ``10**MAX_EXP10`` before computing them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from agentgym.environments.math.expr import MAX_BITS, MAX_EXP10, ExprError, Node, TooLarge

__all__ = [
    "NotRational",
    "apply_binop",
    "eval_exact",
    "eval_fp",
    "eval_mp",
    "eval_mp_real",
    "eval_mp_span",
    "mp_context",
]


# ---------------------------------------------------------------------------- exact
class NotRational(Exception):
    """The subtree has symbols, constants or irrational operations."""


def _pow_exact(b: Fraction, e: Fraction) -> Fraction:
    if e.denominator != 1:
        raise NotRational
    n = e.numerator
    if b == 0:
        if n < 0:
            raise ExprError("division by zero (0 to a negative power)")
        return Fraction(int(n == 0))
    if b == 1:
        return b
    if b == -1:
        return Fraction(1 if n % 2 == 0 else -1)
    bits = abs(n) * max(b.numerator.bit_length(), b.denominator.bit_length())
    if bits > MAX_BITS:
        raise TooLarge(f"a power would have about {bits} bits; at most {MAX_BITS}")
    return b**n


def apply_binop(op: str, a: Any, b: Any, power: Callable[[Any, Any], Any]) -> Any:
    """``a op b`` for ``add sub mul div`` (zero division is an :class:`ExprError`); anything
    else is ``pow``, computed by ``power`` (each evaluator guards powers its own way)."""
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        if b == 0:
            raise ExprError("division by zero")
        return a / b
    return power(a, b)


def eval_exact(node: Node) -> Fraction:
    """The exact rational value, or ``NotRational`` when there is none to compute cheaply."""
    op = node[0]
    if op == "num":
        return node[1]
    if op == "neg":
        return -eval_exact(node[1])
    if op in ("add", "sub", "mul", "div", "pow"):
        return apply_binop(op, eval_exact(node[1]), eval_exact(node[2]), _pow_exact)  # type: ignore[no-any-return]
    if op == "fn" and node[1] in _EXACT_FNS:
        from agentgym.environments.math import special  # imports this module: not at the top

        name, args = node[1], [eval_exact(a) for a in node[2:]]
        if name == "abs":
            return abs(args[0])
        if name == "sqrt":
            return special.root(args[0], Fraction(2))
        if name == "log":
            if len(args) == 1:
                raise NotRational  # ln x is rational only at 1: sympy says so when it matters
            return special.log_base(args[0], args[1])
        return getattr(special, name)(*args)  # type: ignore[no-any-return]
    raise NotRational


_EXACT_FNS = {"abs", "sqrt", "root", "factorial", "factorial2", "binom", "log"}


# ---------------------------------------------------------------------------- numeric
_local = threading.local()


def mp_context(dps: int = 50) -> Any:
    """This thread's mpmath context of ``dps`` digits (mpmath's global ``mp`` is shared state)."""
    ctxs = getattr(_local, "ctxs", None)
    if ctxs is None:
        ctxs = _local.ctxs = {}
    ctx = ctxs.get(dps)
    if ctx is None:
        import mpmath

        ctx = ctxs[dps] = mpmath.MPContext()
        ctx.dps = dps
    return ctx


def _guard(ctx: Any, v: Any) -> Any:
    if v != 0 and ctx.mag(v) > 3.33 * MAX_EXP10:  # mag is log2 of |v|
        raise TooLarge(f"a value exceeds 10**{MAX_EXP10}")
    return v


_MP_FUNCS = {
    "sqrt": "sqrt", "exp": "exp", "ln": "ln", "sin": "sin", "cos": "cos", "tan": "tan",
    "sec": "sec", "csc": "csc", "cot": "cot", "asin": "asin", "acos": "acos", "atan": "atan",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "sinh": "sinh", "cosh": "cosh",
    "tanh": "tanh", "abs": "fabs",
}


def eval_mp(node: Node, env: dict[str, Any], dps: int = 50) -> Any:
    """Evaluate with this thread's ``dps``-digit mpmath context; symbols from ``env``.

    Complex values are allowed. Raises :class:`TooLarge` when a value would pass
    ``10**MAX_EXP10``, which also makes a cheap 15-digit run a magnitude guard for sympy.
    """
    return _mp(mp_context(dps), node, env)


def eval_mp_real(node: Node, env: dict[str, Any], dps: int = 50) -> tuple[Any, bool]:
    """:func:`eval_mp`, and whether every intermediate value was real (no ``i``, no root or
    log of a negative number on the way, even when the final value is real: ``|(-1)^(1/3)|``)."""
    _local.complex_seen = False
    v = _mp(mp_context(dps), node, env)
    return v, not _local.complex_seen


def eval_fp(node: Node, env: dict[str, float]) -> Any:
    """:func:`eval_mp` in machine floats (mpmath's ``fp`` context): ~4x cheaper, 15 digits."""
    import mpmath

    return _mp(mpmath.fp, node, env)


def eval_mp_span(node: Node, env: dict[str, Any], dps: int = 50) -> tuple[Any, int, int]:
    """:func:`eval_mp`, and the smallest and largest ``mag`` (about log2 of the absolute value)
    of every nonzero intermediate value: how far the computation strayed from the result's size."""
    _local.span = span = [1 << 30, -(1 << 30)]
    try:
        v = _mp(mp_context(dps), node, env)
    finally:
        _local.span = None
    return v, span[0], span[1]


def _mp(ctx: Any, node: Node, env: dict[str, Any]) -> Any:
    v = _mp_node(ctx, node, env)
    if type(v) is ctx.mpc:
        _local.complex_seen = True
    span = getattr(_local, "span", None)
    if span is not None and v:  # bool(mpf) is ~6x cheaper than v != 0
        m = ctx.mag(v)
        if m < span[0]:
            span[0] = m
        if m > span[1]:
            span[1] = m
    return v


def _mp_node(ctx: Any, node: Node, env: dict[str, Any]) -> Any:
    op = node[0]
    if op == "num":
        f = node[1]
        return ctx.mpf(f.numerator) / f.denominator if f.denominator != 1 else ctx.mpf(f.numerator)
    if op == "sym":
        try:
            return env[node[1]]
        except KeyError:
            raise ExprError(f"no value for symbol {node[1]!r}") from None
    if op == "const":
        c = node[1]
        if c == "oo":
            raise ExprError("infinity is not a number here")
        return ctx.pi if c == "pi" else ctx.e if c == "e" else ctx.mpc(0, 1)
    if op == "neg":
        return -_mp(ctx, node[1], env)
    if op == "fn":
        name = node[1]
        a = _mp(ctx, node[2], env)
        if name == "abs":
            return abs(a)
        if name == "root":
            n = _mp(ctx, node[3], env)
            if n == 0:
                raise ExprError("zeroth root")
            return _guard(ctx, ctx.power(a, 1 / n))
        if name == "log":
            if len(node) > 3:  # log(x, base)
                return ctx.ln(a) / ctx.ln(_mp(ctx, node[3], env))
            return ctx.ln(a)  # log is the natural log, as in sympy
        if name in ("factorial", "factorial2"):
            if ctx.re(a) > 2 * 3_000:  # special.MAX_FACTORIAL (x!! is about sqrt(x!))
                raise TooLarge("a factorial is too large to evaluate")
            return _guard(ctx, ctx.factorial(a) if name == "factorial" else ctx.fac2(a))
        if name == "binom":
            b = _mp(ctx, node[3], env)
            if abs(a) > MAX_BITS:
                raise TooLarge("a binomial coefficient is too large to evaluate")
            return _guard(ctx, ctx.binomial(a, b))
        if name == "exp" and ctx.re(a) > 2.3 * MAX_EXP10:
            raise TooLarge("exp argument too large")
        if a == 0 and name in ("ln", "cot", "csc"):
            raise ExprError(f"{name}(0) is undefined")
        return _guard(ctx, getattr(ctx, _MP_FUNCS[name])(a))
    a = _mp(ctx, node[1], env)
    exp = node[2]
    if op == "pow" and exp[0] == "num" and exp[1].denominator == 1 and abs(exp[1].numerator) <= 4096:
        # an integer power (the common case): binary powering, guarded by the exponent of a
        n = exp[1].numerator
        if not a:
            if n < 0:
                raise ExprError("0 to a negative power")
            return ctx.mpf(int(n == 0))
        if abs(n) * abs(ctx.mag(a)) > 3.33 * MAX_EXP10:
            raise TooLarge("a power is too large to evaluate")
        return _guard(ctx, a**n)
    b = _mp(ctx, exp, env)
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return _guard(ctx, a * b)
    if op == "div":
        if b == 0:
            raise ExprError("division by zero")
        return _guard(ctx, a / b)
    # pow: bound the result's magnitude *before* computing it
    if a == 0:
        if ctx.re(b) < 0:
            raise ExprError("0 to a negative power")
        return ctx.mpf(0) if b != 0 else ctx.mpf(1)
    # mag(a) bounds log2|a| within a few units; ctx.log would cost as much as the power
    if abs(b) > 1e7 or (abs(a) != 1 and abs(b) * (abs(ctx.mag(a)) + 2) > 3.33 * MAX_EXP10):
        raise TooLarge("a power is too large to evaluate")
    return _guard(ctx, ctx.power(a, b))
