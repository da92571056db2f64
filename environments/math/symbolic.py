"""sympy as the equivalence engine: bounded conversion, a symbolic zero test, a numeric check.

:func:`equal` decides whether two parsed expressions (nodes of :mod:`.expr`, already bounded
in size, depth, digits and literal length) are equal. The verifier calls it only after its
microsecond fast paths (identical text, equal nodes, exact rational arithmetic) were
inconclusive, so a policy that writes the reference answer never gets here.

1. **Guard.** Each side is evaluated with a private 15-digit mpmath context at the fixed
   points (:func:`.values.eval_mp`), lazily, one point at a time: a value beyond
   ``10**MAX_EXP10`` raises :class:`.expr.TooLarge` *before* sympy sees the expression there
   (sympy's ``evalf`` raises its working precision without limit: ``sin(e^(e^(e^5)))``);
   points where a side is undefined are skipped.
2. **Which engine.** sympy's cost is bounded only on "sympy-safe" expressions
   (:func:`sympy_safe`): sums nested at most ``MAX_SUM_NESTING`` deep through functions or
   powers, at most ``MAX_RADICALS`` roots per side, and every intermediate value real at the
   first point (sympy's ``Abs``/``re``/``im`` of complex roots such as ``|(-1)^(1/3) + 1|``
   recurse without end while it builds them). Beyond that (measured: minutes for six nested
   cancelling sums, 4-8 s per function of an algebraic zero with eight roots, a hang for that
   ``Abs``) the two sides are compared by step 5 with fixed 50-digit mpmath values instead
   (linear time); so is any pair on which sympy raises an internal error. Of the 407
   labelled pairs only 2 (complex values) take this path.
3. **Conversion** node -> sympy objects built directly (``Integer``/``Rational``, ``pi``,
   ``E``, ``I``, ``Symbol(positive=True)``, ``Add``/``Mul``/``Pow``, ``sqrt``, ``log``, ...),
   never through ``sympify``/``parse_expr`` (they ``eval`` strings). sympy evaluates while it
   builds, so powers are checked first: an exact power over ``MAX_BITS`` bits or a root of a
   number over ``MAX_RADICAND_BITS`` bits (sympy factors radicands) is ``TooLarge``; a power
   with an exponent over ``MAX_SYM_EXP`` is built with ``evaluate=False`` and step 4 skips it.
4. **Symbolic test** of ``d = a - b``: sympy's automatic canonical form, then, when the
   estimated size of the result is at most ``MAX_EXPAND_TERMS`` terms, ``cancel`` (rational
   functions with a symbolic denominator) or ``expand``, and ``radsimp`` for small constants.
   ``d == 0`` proves equal; a nonzero *rational* ``d`` proves unequal (whatever the
   magnitudes); with ``+ C`` a ``d`` free of symbols proves equal. No ``simplify`` (its cost
   has no bound).
5. **Numeric check** when that is inconclusive: ``a.evalf(50, subs=point)`` and
   ``b.evalf(50, subs=point)`` (sympy's evalf over mpmath) at up to six fixed points in
   [0.6, 2.3] (+0.1 per further variable); equal when ``|a - b| <= 1e-30 * max(1, |a|, |b|)``
   at four points (the random-point test sympy's ``Expr.equals`` falls back to); with ``+ C``
   the difference must be the same at every point. A decimal reference with an exact
   prediction (``places``) compares once, to the reference's precision. Before that, a ``d``
   that sympy's adaptive evalf certifies nonzero at the first point is unequal however small
   (``e^-200``, ``10^-45 x``): the tolerance absorbs rounding, never a real term. On the
   fixed-precision path (step 2), agreement counts only where every intermediate value stayed
   within ``2**±SPAN`` of 1 (a tiny term vanishes at 50 digits).

Symbols are positive (the points are), so ``sqrt(x^2) == x`` and ``|x| == x``. sympy runs
under one process-wide lock: some of its ``evalf`` paths set mpmath's *global* precision
(``mpmath.workprec``), which is not thread-safe; with the GIL the lock costs no parallelism.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Iterator
from fractions import Fraction
from math import comb
from typing import Any

from agentgym.environments.math import poly
from agentgym.environments.math.expr import MAX_BITS, ExprError, Node, TooLarge, free_symbols
from agentgym.environments.math.numeric import SPAN, decide
from agentgym.environments.math.values import apply_binop, eval_mp_real, eval_mp_span, mp_context

__all__ = ["MAX_EXPAND_TERMS", "POINTS", "equal", "radicals", "sum_nesting", "sympy_safe", "to_sympy"]

MAX_EXPAND_TERMS = 400  # estimated terms of expand(d); (x+1)^40 is 41, (x+y+z)^40 is 861
MAX_RADICAND_BITS = 1_024  # sympy factors a radicand (trial division, primality) to build a root
MAX_SYM_EXP = 2_000  # |integer exponent| sympy may multiply out exactly
MAX_SUM_NESTING = 2  # deeper nested sums skip sympy (see sum_nesting)
MAX_RADICALS = 4  # more roots on one side skip sympy (see radicals)
MAX_OPS = 120  # count_ops of a constant difference that radsimp may rationalise
REL_TOL_EXP = -30  # 30 significant digits out of the 50 computed
POINTS = ("0.61803398874989484", "1.32471795724474602", "1.73205080756887729",
          "2.23606797749978969", "0.86602540378443864", "1.41421356237309504")
_NEEDED = 4  # agreeing points that decide "equal" (two when a + C makes the test weaker)

_LOCK = threading.Lock()
_FUNCS: dict[str, Any] = {}


def _sympy() -> Any:
    import sympy  # heavy (~0.5 s): imported on the first expression that needs it

    if not _FUNCS:
        _FUNCS.update({
            "sqrt": sympy.sqrt, "exp": sympy.exp, "ln": sympy.log, "sin": sympy.sin,
            "cos": sympy.cos, "tan": sympy.tan, "sec": sympy.sec, "csc": sympy.csc,
            "cot": sympy.cot, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan,
            "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
            "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "abs": sympy.Abs,
            "factorial": sympy.factorial, "factorial2": sympy.factorial2,
        })
    return sympy


# ---------------------------------------------------------------------------- conversion
class _Conv:
    """node -> sympy; ``exact_ok`` turns False when a power had to stay unevaluated."""

    def __init__(self, sp: Any) -> None:
        self.sp = sp
        self.exact_ok = True
        self.syms: dict[str, Any] = {}

    def __call__(self, node: Node) -> Any:
        sp, op = self.sp, node[0]
        if op == "num":
            f: Fraction = node[1]
            return sp.Rational(f.numerator, f.denominator)
        if op == "sym":
            s = self.syms.get(node[1])
            if s is None:
                s = self.syms[node[1]] = sp.Symbol(node[1], positive=True)
            return s
        if op == "const":
            return {"pi": sp.pi, "e": sp.E, "i": sp.I, "oo": sp.oo}[node[1]]
        if op == "neg":
            return -self(node[1])
        if op == "fn":
            return self._fn(node)
        return apply_binop(op, self(node[1]), self(node[2]), self._pow)

    def _pow(self, a: Any, b: Any) -> Any:
        sp = self.sp
        if a == 0 and b.is_Rational and b < 0:
            raise ExprError("0 to a negative power")
        if a.is_Rational and b.is_Rational and a not in (sp.S.One, sp.S.NegativeOne):
            bits = max(a.p.bit_length(), a.q.bit_length())
            if b.q == 1 and abs(b.p) * bits > MAX_BITS:
                raise TooLarge(f"a power would have about {abs(b.p) * bits} bits; at most {MAX_BITS}")
            if b.q != 1 and bits > MAX_RADICAND_BITS:  # sympy factors radicands when it builds roots
                raise TooLarge(f"a root of a {bits}-bit number; at most {MAX_RADICAND_BITS} bits")
        if b.is_Rational and abs(b.p) > MAX_SYM_EXP and not a.is_Symbol:
            self.exact_ok = False  # (3x)^5000 distributes into 3^5000 * x^5000
            return sp.Pow(a, b, evaluate=False)
        return a**b

    def _fn(self, node: Node) -> Any:
        sp, name = self.sp, node[1]
        a = self(node[2])
        if name == "sqrt":
            return self._pow(a, sp.Rational(1, 2))
        if name == "root":
            n = self(node[3])
            if n == 0:
                raise ExprError("zeroth root")
            return self._pow(a, 1 / n)
        if name == "log":
            if len(node) > 3:  # log(x, base)
                return sp.log(a) / sp.log(self(node[3]))
            return sp.log(a)  # log is the natural log, as in sympy
        if name == "binom":
            return sp.binomial(a, self(node[3]))
        return _FUNCS[name](a)


def to_sympy(node: Node) -> Any:
    """The sympy expression of a bounded node (never via strings). Takes the sympy lock."""
    with _LOCK:
        return _Conv(_sympy())(node)


# ---------------------------------------------------------------------------- symbolic
def _terms(e: Any, sp: Any) -> int:
    """Upper estimate of the number of terms ``expand(e)`` produces (capped, no expansion)."""
    cap = 10**9
    if e.is_Atom:
        return 1
    if e.is_Add:
        return min(cap, sum(_terms(t, sp) for t in e.args))
    if e.is_Mul:
        out = 1
        for t in e.args:
            out = min(cap, out * _terms(t, sp))
        return out
    if e.is_Pow:
        k = _terms(e.base, sp)
        n = e.exp
        if n.is_Integer and n != 0:  # multinomial: C(|n| + k - 1, k - 1) monomials
            m = abs(int(n))
            if k > 1 and m > 1:
                return cap if m > 10_000 else min(cap, comb(m + k - 1, k - 1))
            return k
        return k + _terms(n, sp)
    return min(cap, sum(_terms(t, sp) for t in e.args))  # functions: expand works inside


def _reduce(d: Any, sp: Any, syms: list[Any], exact_ok: bool) -> Any:
    """``d`` in the most reduced form the bounds allow (``0`` when sympy proves it zero)."""
    if d == 0 or not exact_ok or _terms(d, sp) > MAX_EXPAND_TERMS:
        return d
    dens = {sp.Pow(p.base, -p.exp) for p in d.atoms(sp.Pow) if p.exp.is_negative and p.base.free_symbols}
    if dens and d.is_rational_function(*syms):
        # cancel multiplies the denominators out: bound the terms that can produce
        # (59 terms 1/(x + k) would take cancel 20 s; the numeric check takes milliseconds)
        cost = _terms(d, sp)
        for den in dens:
            cost = min(10**9, cost * _terms(den, sp))
        if cost > MAX_EXPAND_TERMS:
            return d
        d = sp.cancel(d)  # 1/(x-1) + 1/(x+1) - 2x/(x^2-1) -> 0
    else:
        d = sp.expand(d)  # (x+1)^2 - x^2 - 2x - 1 -> 0
    if d != 0 and not d.free_symbols and d.count_ops() <= MAX_OPS:
        d = sp.radsimp(d)  # 1/(sqrt(3) - sqrt(2)) - sqrt(3) - sqrt(2) -> 0
    return d


# ---------------------------------------------------------------------------- numeric
def _mp(v: Any, ctx: Any) -> Any:
    """sympy number -> mpmath value in ``ctx``, or None when it is not a finite number."""
    if v.is_Float:
        f = ctx.make_mpf(v._mpf_)
        return f if ctx.isfinite(f) else None
    if v.is_Rational:
        return ctx.mpf(v.p) / v.q
    if not v.is_number:
        return None
    re, im = v.as_real_imag()
    if not (re.is_Number and im.is_Number) or not (re.is_finite and im.is_finite):
        return None
    return ctx.mpc(_mp(re, ctx), _mp(im, ctx))


_FRAC_POINTS = [Fraction(p) for p in POINTS]


def _points(names: list[str]) -> list[dict[str, Fraction]]:
    """The fixed points, exact, per variable (shifted by 0.1 per further variable)."""
    return _points_of(tuple(names))


@functools.lru_cache(maxsize=256)
def _points_of(names: tuple[str, ...]) -> list[dict[str, Fraction]]:
    # cached and shared: callers only read them
    return [{s: _FRAC_POINTS[(k + 2 * j) % len(POINTS)] + Fraction(j, 10)
             for j, s in enumerate(names)} for k in range(len(POINTS))]


def _guarded(pn: Node, rn: Node, pts: list[dict[str, Fraction]],
             real: list[bool]) -> Iterator[dict[str, Fraction]]:
    """The points where both sides are defined, checked lazily, one by one.

    A 15-digit mpmath evaluation per point raises :class:`.expr.TooLarge` when a magnitude
    passes ``10**MAX_EXP10``, before sympy evaluates there. ``real[0]`` is set to whether
    every intermediate value was real at the points so far.
    """
    ctx = mp_context(15)
    for pt in pts:
        env = {s: ctx.mpf(v.numerator) / v.denominator for s, v in pt.items()}
        try:
            real_p = eval_mp_real(pn, env, 15)[1]
            real_r = eval_mp_real(rn, env, 15)[1]
        except TooLarge:
            raise
        except (ExprError, ZeroDivisionError, ValueError, OverflowError):
            continue
        real[0] = real[0] and real_p and real_r
        yield pt


def _close(ctx: Any, a: Any, b: Any) -> bool:
    scale = max(ctx.mpf(1), abs(a), abs(b))
    return bool(abs(a - b) <= scale * ctx.mpf(10) ** REL_TOL_EXP)


def sum_nesting(node: Node) -> int:
    """How many sums sit inside one another through a function or power (``sqrt(2 + sqrt(3))``: 2).

    sympy's evalf re-evaluates a sum's terms at higher precision while the sum cancels, and so
    do its sign tests while it builds ``|...|`` or roots: nested cancelling sums cost about
    9**levels evaluations (6 levels of ``sin(... + ln 6 - ln 2 - ln 3)`` ran for minutes).
    Chained ``+``/``-`` are one sum (sympy flattens them).
    """
    return _levels(node, False)


def _levels(node: Node, in_sum: bool) -> int:
    op = node[0]
    if op in ("num", "sym", "const"):
        return 0
    if op == "neg":
        return _levels(node[1], in_sum)
    kids = [c for c in node[1:] if isinstance(c, tuple)]
    if op in ("add", "sub"):
        return (0 if in_sum else 1) + max(_levels(c, True) for c in kids)
    return max(_levels(c, False) for c in kids)


def radicals(node: Node) -> int:
    """Roots in the expression (``sqrt``, ``root``, powers with a non-integer exponent).

    sympy decides the sign of a constant it cannot resolve in two digits (an algebraic number
    equal to 0, inside ``|...|``, ``sin``, ``ln``) with ``minimal_polynomial``, whose degree
    doubles with every root: eight roots took it 4-8 s per function call.
    """
    op = node[0]
    if op in ("num", "sym", "const"):
        return 0
    own = op == "fn" and node[1] in ("sqrt", "root") or op == "pow" and not (
        node[2][0] == "num" and node[2][1].denominator == 1)
    return int(own) + sum(radicals(c) for c in node[1:] if isinstance(c, tuple))


def sympy_safe(node: Node) -> bool:
    """Whether sympy's costs on this expression are bounded (see the two counts above)."""
    return sum_nesting(node) <= MAX_SUM_NESTING and radicals(node) <= MAX_RADICALS


def equal(pn: Node, rn: Node, *, has_c: bool = False, places: int | None = None) -> bool:
    """Are ``pn`` and ``rn`` equal (up to an additive constant when ``has_c``)?

    ``places``: the reference is a decimal with that many places and the prediction is exact:
    accept when the prediction rounds to it (the documented decimal rule). Raises
    :class:`.expr.TooLarge` past the guards and :class:`.expr.ExprError` when the two cannot
    be compared (undefined everywhere, division by zero).
    """
    names = sorted(free_symbols(pn) | free_symbols(rn))
    places, has_c = (None, has_c) if names else (places, False)
    # Exact polynomial identity, then values: most pairs are settled without sympy, by
    # poly.decide (rational functions) or mpmath (numeric.decide says when its fixed-precision
    # values can be trusted); sympy only sees the rest.
    fast = poly.decide(pn, rn, has_c=has_c) if names else None
    if fast is None:
        fast = decide(pn, rn, _points(names) if names else [{}], needed=_NEEDED if names else 1,
                      has_c=has_c, places=places)
    if fast is not None:
        return fast
    # The first defined point is checked before sympy builds anything: a constant part
    # (the same at every point) may be evaluated by sympy's assumptions while building.
    real = [True]
    pts = _guarded(pn, rn, _points(names) if names else [{}], real)
    first = next(pts, None)
    if first is None:
        raise ExprError("could not evaluate the expressions at enough points to compare them")
    pts = itertools.chain((first,), pts)
    if not (real[0] and sympy_safe(pn) and sympy_safe(rn)):  # sympy's cost would have no bound
        return _compare(_fixed_values(pn, rn, pts), len(names), has_c, places)
    try:
        return _sympy_equal(pn, rn, names, pts, has_c, places, first)
    except (ExprError, RecursionError):
        raise
    except Exception:  # noqa: BLE001 - a sympy internal error must not crash an env step
        pts = _guarded(pn, rn, _points(names) if names else [{}], [True])
        return _compare(_fixed_values(pn, rn, pts), len(names), has_c, places)


def _sympy_equal(pn: Node, rn: Node, names: list[str], pts: Iterator[dict[str, Fraction]],
                 has_c: bool, places: int | None, first: dict[str, Fraction]) -> bool:
    with _LOCK:
        sp = _sympy()
        conv = _Conv(sp)
        a, b = conv(pn), conv(rn)
        if a.has(sp.zoo, sp.nan) or b.has(sp.zoo, sp.nan):
            raise ExprError("the expression is undefined (division by zero)")
        syms = [conv.syms[n] for n in names]
        if places is None:
            d = _reduce(a - b, sp, syms, conv.exact_ok)
            if has_c and syms and not d.free_symbols:  # + C: any constant difference is fine
                return True
            if d.is_Rational:  # proven: 0 is equal, a nonzero exact number is not, whatever
                return d == 0  # the magnitudes ((sqrt(2)+sqrt(3))^200 + 1 is not its power)
            if not has_c and _certified_nonzero(d, sp, conv, first):
                return False  # 4 + e^-200 is not 4; x^2 + 10^-45 x is not x^2
        return _compare(_sympy_values(a, b, sp, conv, pts), len(names), has_c, places)


CERTIFIED_BITS = 20  # sympy's evalf reports the bits it vouches for; a true zero gets ~1


def _certified_nonzero(d: Any, sp: Any, conv: _Conv, point: dict[str, Fraction]) -> bool:
    """Whether sympy's adaptive evalf proves ``d`` nonzero at ``point``.

    The fixed-precision comparison below accepts a difference under ``1e-30`` of the scale as
    rounding: right for a true identity whose zero sympy cannot prove (``ln 6 - ln 2 - ln 3``,
    ``sin^2 + cos^2 - 1``: evalf gives up on them with a precision of about 1 bit), wrong for
    a small but real term (``e^-200``, ``10^-45 x``: evalf raises its working precision until
    it has 30 correct digits of them). A certified nonzero value is never "equal".
    """
    subs = {conv.syms[s]: sp.Rational(v.numerator, v.denominator) for s, v in point.items()}
    try:
        v = d.evalf(30, subs=subs)
        parts = v.as_real_imag()
    except Exception:  # noqa: BLE001 - sympy internals: undecided, the numeric check goes on
        return False
    return any(p.is_Float and p != 0 and getattr(p, "_prec", 0) >= CERTIFIED_BITS for p in parts)


def _compare(values: Iterator[tuple[Any, Any] | None], n_syms: int, has_c: bool,
             places: int | None) -> bool:
    """Decide from ``(a, b)`` values at successive points (None: undefined there)."""
    ctx = mp_context()
    first: Any = None
    agreed = 0
    for vals in values:
        if vals is None:
            continue  # outside the domain here (e.g. a pole): try the next point
        va, vb = vals
        if places is not None:  # constants only: a single evaluation decides
            return bool(abs(va - vb) <= ctx.mpf(10) ** (-places) / 2 * (1 + ctx.mpf(10) ** -40))
        diff = va - vb
        if has_c:  # any antiderivative: the difference is the same constant everywhere
            first = diff if first is None else first
            if not _close(ctx, diff, first):
                return False
        elif not _close(ctx, va, vb):
            return False
        agreed += 1
        if agreed >= _NEEDED or not n_syms:
            return True
    if agreed >= 2 and has_c or agreed >= 1 and not n_syms:
        return True
    raise ExprError("could not evaluate the expressions at enough points to compare them")


def _sympy_values(a: Any, b: Any, sp: Any, conv: _Conv,
                  pts: Iterator[dict[str, Fraction]]) -> Iterator[tuple[Any, Any] | None]:
    ctx = mp_context()
    for pt in pts:
        subs = {conv.syms[s]: sp.Rational(v.numerator, v.denominator) for s, v in pt.items()}
        va, vb = _mp(a.evalf(50, subs=subs), ctx), _mp(b.evalf(50, subs=subs), ctx)
        yield None if va is None or vb is None else (va, vb)


def _fixed_values(pn: Node, rn: Node,
                  pts: Iterator[dict[str, Fraction]]) -> Iterator[tuple[Any, Any] | None]:
    """50 digits, no adaptive precision: linear in the size of the expression.

    Agreement is trusted only when every intermediate value stayed within ``2**±SPAN`` of 1
    (as in :mod:`.numeric`): a term far below the result (``e^-200``) vanishes at 50 digits,
    so such a point is skipped rather than read as "equal"."""
    ctx = mp_context()
    for pt in pts:
        env = {s: ctx.mpf(v.numerator) / v.denominator for s, v in pt.items()}
        try:
            va, alo, ahi = eval_mp_span(pn, env)
            vb, blo, bhi = eval_mp_span(rn, env)
        except TooLarge:
            raise
        except (ExprError, ZeroDivisionError, ValueError, OverflowError):
            yield None
            continue
        tame = min(alo, blo) >= -SPAN and max(ahi, bhi) <= SPAN
        yield (va, vb) if tame or not _close(ctx, va, vb) else None
