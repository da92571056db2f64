"""Exact values of functions that are often rational: roots, factorials, binomials, logarithms.

``sqrt(4)``, ``5!``, ``binom(5, 2)`` and ``log_2(8)`` are integers; deciding them with exact
integer arithmetic keeps such answers on the verifier's microsecond path (no sympy). Each
function raises :class:`.expr.NotRational` when the value is not a rational it can compute
cheaply, and :class:`.expr.TooLarge` past the same bounds as the rest of the grammar.
"""

from __future__ import annotations

import math
from fractions import Fraction

from agentgym.environments.math.expr import MAX_BITS, ExprError, TooLarge
from agentgym.environments.math.values import NotRational

__all__ = ["MAX_FACTORIAL", "binom", "factorial", "factorial2", "log_base", "root"]

MAX_FACTORIAL = 3_000  # 3000! has ~30,000 bits (MAX_BITS is 100,000); 10**4! would not fit


def _int(v: Fraction, what: str) -> int:
    if v.denominator != 1:
        raise NotRational  # gamma of a non-integer: left to sympy / mpmath
    return v.numerator


def factorial(v: Fraction) -> Fraction:
    n = _int(v, "factorial")
    if n < 0:
        raise ExprError(f"factorial of a negative integer ({n}!) is undefined")
    if n > MAX_FACTORIAL:
        raise TooLarge(f"{n}! is too large; at most {MAX_FACTORIAL}!")
    return Fraction(math.factorial(n))


def factorial2(v: Fraction) -> Fraction:
    n = _int(v, "double factorial")
    if n < -1:
        raise ExprError(f"double factorial of {n} is undefined")
    if n > 2 * MAX_FACTORIAL:
        raise TooLarge(f"{n}!! is too large")
    return Fraction(math.prod(range(n, 0, -2)) if n > 0 else 1)


def binom(nv: Fraction, kv: Fraction) -> Fraction:
    n, k = _int(nv, "binom"), _int(kv, "binom")
    if n < 0 or k < 0:
        raise NotRational  # generalised binomials: left to sympy
    if n > MAX_BITS:
        raise TooLarge(f"binom({n}, {k}) is too large")
    return Fraction(math.comb(n, k))


def _iroot(x: int, q: int) -> int | None:
    """The integer q-th root of x >= 0 when x is a perfect q-th power, else None."""
    if x < 2:
        return x
    r = round(x ** (1.0 / q)) if x.bit_length() < 1000 else math.isqrt(x) if q == 2 else None
    if r is None:
        return None
    for c in (r - 1, r, r + 1):
        if c >= 0 and c**q == x:
            return c
    return None


def root(v: Fraction, n: Fraction) -> Fraction:
    """``v ** (1/n)`` when it is rational (perfect powers), else NotRational."""
    q = _int(n, "root")
    if q < 1 or q > 64 or v < 0:
        raise NotRational
    a, b = _iroot(v.numerator, q), _iroot(v.denominator, q)
    if a is None or b is None:
        raise NotRational
    return Fraction(a, b)


def log_base(x: Fraction, base: Fraction) -> Fraction:
    """``log_base(x)`` when it is a rational p/q with small q (``log_2 8 = 3``, ``log_8 2 = 1/3``)."""
    if x <= 0 or base <= 0 or base == 1:
        raise NotRational
    if x == 1:
        return Fraction(0)
    guess = Fraction(math.log(x) / math.log(base)).limit_denominator(12)
    p, q = guess.numerator, guess.denominator
    bits = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(p)
    if p == 0 or bits > MAX_BITS or max(x.numerator.bit_length(), x.denominator.bit_length()) * q > MAX_BITS:
        raise NotRational
    if base**p == x**q:  # exact integer arithmetic decides, the float only guessed
        return guess
    raise NotRational
