"""Exact identity of rational functions: ``(x^2 - 1)/(x - 1)`` is ``x + 1``, with no evaluation.

Answers to derivatives, antiderivatives and algebra are mostly polynomials or ratios of them
with rational coefficients. For those, equality is decided exactly and cheaply: each side
becomes ``P/Q`` (expanded polynomials with ``Fraction`` coefficients) and the sides are equal
as functions exactly when ``P1*Q2 == P2*Q1``; with ``+ C``, when ``P1*Q2 - P2*Q1`` is a
constant multiple of ``Q1*Q2``. Two different rational functions differ somewhere on the
positive reals, so "unequal" is exact too. Anything else (constants such as pi, roots,
functions, a size past the bounds) returns None and the numeric path decides.
"""

from __future__ import annotations

from fractions import Fraction

from agentgym.environments.math.expr import Node, free_symbols

__all__ = ["MAX_DEGREE", "MAX_TERMS", "decide"]

MAX_TERMS = 400  # terms of any intermediate polynomial (symbolic.MAX_EXPAND_TERMS's bound)
MAX_DEGREE = 60  # total degree of any intermediate polynomial

Poly = dict[tuple[int, ...], Fraction]  # exponent vector (one entry per variable) -> coefficient


class _Skip(Exception):
    """Not a rational function with rational coefficients, or too large to expand."""


def _check(p: Poly) -> Poly:
    if len(p) > MAX_TERMS or any(sum(m) > MAX_DEGREE for m in p):
        raise _Skip
    return p


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        v = out.get(m, Fraction(0)) + sign * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def _mul(a: Poly, b: Poly) -> Poly:
    if len(a) * len(b) > 4 * MAX_TERMS:
        raise _Skip
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(x + y for x, y in zip(ma, mb))
            v = out.get(m, Fraction(0)) + ca * cb
            if v:
                out[m] = v
            else:
                out.pop(m, None)
    return _check(out)


class _Rat:
    """node -> (numerator, denominator) polynomials over the given variables."""

    def __init__(self, names: list[str]) -> None:
        self.index = {n: i for i, n in enumerate(names)}
        self.zero = (0,) * len(names)

    def const(self, c: Fraction) -> Poly:
        return {self.zero: c} if c else {}

    def __call__(self, node: Node) -> tuple[Poly, Poly]:
        op = node[0]
        if op == "num":
            return self.const(node[1]), self.const(Fraction(1))
        if op == "sym":
            m = [0] * len(self.index)
            m[self.index[node[1]]] = 1
            return {tuple(m): Fraction(1)}, self.const(Fraction(1))
        if op == "neg":
            n, d = self(node[1])
            return {m: -c for m, c in n.items()}, d
        if op in ("add", "sub", "mul", "div"):
            (n1, d1), (n2, d2) = self(node[1]), self(node[2])
            if op == "mul":
                return _mul(n1, n2), _mul(d1, d2)
            if op == "div":
                if not n2:
                    raise _Skip  # division by zero: the full path reports it
                return _mul(n1, d2), _mul(d1, n2)
            if d1 == d2:  # common denominators stay small
                return _add(n1, n2, 1 if op == "add" else -1), d1
            return _add(_mul(n1, d2), _mul(n2, d1), 1 if op == "add" else -1), _mul(d1, d2)
        if op == "pow" and node[2][0] == "num" and node[2][1].denominator == 1:
            k = node[2][1].numerator
            n, d = self(node[1])
            if k < 0:
                if not n:
                    raise _Skip
                n, d, k = d, n, -k
            if k > MAX_DEGREE:
                raise _Skip
            rn, rd = self.const(Fraction(1)), self.const(Fraction(1))
            for _ in range(k):
                rn, rd = _mul(rn, n), _mul(rd, d)
            return rn, rd
        raise _Skip  # constants (pi, e, i), functions, non-integer powers


def decide(pn: Node, rn: Node, *, has_c: bool = False) -> bool | None:
    """True/False when both sides are rational functions with rational coefficients, else None."""
    names = sorted(free_symbols(pn) | free_symbols(rn))
    if not names:
        return None  # constants: exact arithmetic or the numeric path
    conv = _Rat(names)
    try:
        (n1, d1), (n2, d2) = conv(pn), conv(rn)
        num, den = _add(_mul(n1, d2), _mul(n2, d1), -1), _mul(d1, d2)
    except _Skip:
        return None
    if not num:
        return True
    if not has_c:
        return False
    # + C: equal when num == c * den for one constant c (any antiderivative)
    m = max(den)
    if m not in num:
        return False
    c = num[m] / den[m]
    return _add(num, {k: c * v for k, v in den.items()}, -1) == {}
