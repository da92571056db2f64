"""Procedural math problems: ten seeded families, three levels each.

Generation is on the reset hot path, so answers are computed with Python ints and
``Fraction`` and written with string formatting (no sympy). Randomness comes only from the
``np.random.Generator`` passed in: one vectorised draw of 32 integers per problem (a numpy
call costs microseconds; 32 plain-int draws from it cost nothing).

Every problem has a stable id ``math/<family>/<12 hex digits of sha256(question)>``: the same
question has the same id whatever level or seed produced it. The same hash decides its split
(:func:`agentgym.splits.hash_split`: one question in five is ``eval``), and :func:`generate`
draws until the problem lands in the split asked for, so an eval problem is never generated
in train. Each family declares the form of its answers (:data:`FORMS`, :mod:`.answer_form`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from agentgym.environments.math.words import word_problem
from agentgym.errors import ConfigError
from agentgym.splits import hash_split, problem_digest

__all__ = ["FAMILIES", "FORMS", "LEVELS", "MAX_DRAWS", "Problem", "Draw", "generate", "fmt_frac", "fmt_poly"]

LEVELS: tuple[str, ...] = ("easy", "medium", "hard")


@dataclass(frozen=True, slots=True)
class Problem:
    id: str
    question: str
    answer: str  # canonical answer text, verified with verify()
    family: str
    level: str
    expression: str | None = None  # plain arithmetic the calculator tool can evaluate
    form: str = "any"  # what a final answer must look like (answer_form); "any": no check
    split: str = "train"  # "train" | "eval" (hash_split of the question, or a dataset row's own)
    given: str | None = None  # the question's expression an answer may not restate (datasets)


class Draw:
    """Cheap integer draws from one vectorised call on the episode's Generator."""

    __slots__ = ("_rng", "_buf", "_i")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._buf: list[int] = rng.integers(0, 1 << 31, size=32).tolist()
        self._i = 0

    def between(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi] (inclusive; modulo bias < 1e-7 for our ranges)."""
        if self._i == len(self._buf):
            self._buf = self._rng.integers(0, 1 << 31, size=32).tolist()
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return lo + v % (hi - lo + 1)

    def nonzero(self, lo: int, hi: int) -> int:
        v = self.between(lo, hi - 1)
        return v if v < 0 else v + 1  # skip 0, keep the range size

    def choice(self, seq: tuple | list):  # type: ignore[type-arg]
        return seq[self.between(0, len(seq) - 1)]


# ---------------------------------------------------------------------------- formatting
def fmt_frac(f: Fraction | int) -> str:
    f = Fraction(f)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def fmt_poly(terms: list[tuple[int, int]], var: str = "x") -> str:
    """``[(3, 2), (-2, 1), (5, 0)]`` -> ``3x^2 - 2x + 5`` (integer coefficients, any order kept)."""
    out: list[str] = []
    for c, p in terms:
        if c == 0:
            continue
        mag = abs(c)
        body = var if p == 1 else f"{var}^{p}" if p else ""
        coef = "" if mag == 1 and body else str(mag)
        term = coef + body
        if not out:
            out.append(("-" if c < 0 else "") + term)
        else:
            out.append((" - " if c < 0 else " + ") + term)
    return "".join(out) or "0"


# ---------------------------------------------------------------------------- families
Gen = Callable[[Draw, int], tuple[str, str, str | None]]  # -> question, answer, expression


def arithmetic(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    if lvl == 0:
        a, b = d.between(1, 99), d.between(1, 99)
        op = d.choice(("+", "-"))
    elif lvl == 1:
        op = d.choice(("*", "+", "-"))
        a, b = (d.between(2, 30), d.between(2, 30)) if op == "*" else (d.between(100, 999), d.between(100, 999))
    else:
        op = d.choice(("*", "/"))
        b = d.between(3, 40)
        a = d.between(20, 400) * (b if op == "/" else 1)
        if op == "*":
            b = d.between(11, 99)
    val = a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a // b
    expr = f"{a} {op} {b}"
    return f"What is {expr}?", str(val), expr


def order_of_operations(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    a, b, c = d.between(2, 12), d.between(2, 12), d.between(2, 12)
    if lvl == 0:
        form = d.between(0, 1)
        expr = f"{a} + {b} * {c}" if form else f"{a} * {b} - {c}"
        val = a + b * c if form else a * b - c
    elif lvl == 1:
        e = d.between(1, 20)
        expr = f"({a} + {b}) * {c} - {e}"
        val = (a + b) * c - e
    else:
        e = d.between(2, 9)
        f = e * d.between(1, 12)
        expr = f"{a} * ({b} - {c})^2 + {f} / {e}"
        val = a * (b - c) ** 2 + f // e
    return f"What is {expr}?", str(val), expr


def _proper(d: Draw) -> Fraction:
    """A fraction that is not an integer, e.g. 7/4 or 2/9."""
    den = d.between(2, 12)
    num = d.between(1, 2 * den - 1)
    return Fraction(num + 1 if num % den == 0 else num, den)


def fractions(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    if lvl == 0:
        den = d.between(3, 12)
        a, b = d.between(1, den - 1), d.between(1, den - 1)
        val = Fraction(a + b, den)
        q = f"{a}/{den} + {b}/{den}"
    else:
        x, y = _proper(d), _proper(d)
        ops = ("+", "-") if lvl == 1 else ("*", "/")
        op = d.choice(ops)
        val = x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x / y
        q = f"{fmt_frac(x)} {op} {fmt_frac(y)}" if lvl == 1 else f"({fmt_frac(x)}) {op} ({fmt_frac(y)})"
        if lvl == 2:
            z = Fraction(d.between(1, 9), d.between(2, 9))
            val += z
            q = f"{q} + {fmt_frac(z)}"
    return f"Compute {q}. Give the answer as a reduced fraction.", fmt_frac(val), q


def linear_equation(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    x = d.between(-20, 20)
    if lvl == 0:
        a = d.between(1, 30)
        return f"Solve for x: x + {a} = {x + a}.", str(x), None
    if lvl == 1:
        a, b = d.nonzero(-9, 9), d.between(-30, 30)
        if a == 1 and b == 0:
            b = d.nonzero(-30, 30)  # "x = 5" would state its own answer
        lhs = fmt_poly([(a, 1), (b, 0)])
        return f"Solve for x: {lhs} = {a * x + b}.", str(x), None
    a, c = d.nonzero(-9, 9), d.nonzero(-9, 9)
    while c == a:
        c = d.nonzero(-9, 9)
    b, e = d.between(-30, 30), d.between(-30, 30)
    sol = Fraction(e - b, a - c)
    return (f"Solve for x: {fmt_poly([(a, 1), (b, 0)])} = {fmt_poly([(c, 1), (e, 0)])}.",
            fmt_frac(sol), None)


def quadratic(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    r1 = d.between(-9, 9)
    r2 = d.between(-9, 8)
    r2 = r2 + 1 if r2 >= r1 else r2  # distinct roots
    if lvl < 2:
        k = 1 if lvl == 0 else d.between(2, 5)
        coeffs = [(k, 2), (-k * (r1 + r2), 1), (k * r1 * r2, 0)]
        roots = sorted((Fraction(r1), Fraction(r2)))
    else:  # (p x - q)(r x - s): rational roots q/p, s/r
        p, r = d.between(2, 5), d.between(1, 4)
        q, s = d.nonzero(-7, 7), d.nonzero(-7, 7)
        if Fraction(q, p) == Fraction(s, r):
            s = -s  # q, s are nonzero, so the roots now differ in sign
        coeffs = [(p * r, 2), (-(p * s + q * r), 1), (q * s, 0)]
        roots = sorted((Fraction(q, p), Fraction(s, r)))
    q_text = f"Solve {fmt_poly(coeffs)} = 0. Give both roots, separated by a comma."
    return q_text, ", ".join(fmt_frac(v) for v in roots), None


def linear_system(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    span = (5, 9, 15)[lvl]
    x, y = d.between(-span, span), d.between(-span, span)
    while True:
        if lvl == 0:
            a1, b1, a2, b2 = 1, 1, 1, -1
        else:
            lim = 5 if lvl == 1 else 12
            a1, b1, a2, b2 = (d.nonzero(-lim, lim) for _ in range(4))
        if a1 * b2 - a2 * b1 != 0:
            break
    e1 = f"{fmt_poly([(a1, 1)], 'x')} {'+' if b1 > 0 else '-'} {fmt_poly([(abs(b1), 1)], 'y')} = {a1 * x + b1 * y}"
    e2 = f"{fmt_poly([(a2, 1)], 'x')} {'+' if b2 > 0 else '-'} {fmt_poly([(abs(b2), 1)], 'y')} = {a2 * x + b2 * y}"
    return f"Solve the system {e1} and {e2}. Give the answer as (x, y).", f"({x}, {y})", None


def derivative(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    if lvl < 2:
        deg = 2 if lvl == 0 else d.between(3, 4)
        terms = [(d.between(-9, 9) if p < deg else d.nonzero(-9, 9), p) for p in range(deg, -1, -1)]
        dterms = [(c * p, p - 1) for c, p in terms if p > 0]
        f, df = fmt_poly(terms), fmt_poly(dterms)
    else:
        a, b = d.between(2, 6), d.nonzero(-5, 5)
        kind = d.between(0, 2)
        if kind == 0:
            n = d.between(2, 5)
            inner = fmt_poly([(a, 1), (b, 0)])
            f = f"({inner})^{n}"
            df = f"{n * a}({inner})" + (f"^{n - 1}" if n > 2 else "")
        elif kind == 1:
            k = abs(b) + 1
            f = f"{a}sin({k}x)"
            df = f"{a * k}cos({k}x)"
        else:
            ex = f"e^({fmt_poly([(b, 1)])})"
            f = f"x^2 {ex}"
            df = f"2x {ex} {'+' if b > 0 else '-'} {fmt_poly([(abs(b), 2)])} {ex}"
    return f"Find the derivative of f(x) = {f} with respect to x.", df, None


def definite_integral(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    deg = lvl + 1
    terms = [(d.between(-6, 6) if p < deg else d.nonzero(-6, 6), p) for p in range(deg, -1, -1)]
    lo = 0 if lvl == 0 else d.between(-3, 2)
    hi = lo + d.between(1, 4)
    val = sum(Fraction(c, p + 1) * (hi ** (p + 1) - lo ** (p + 1)) for c, p in terms)
    q = f"Evaluate the definite integral of {fmt_poly(terms)} with respect to x from x = {lo} to x = {hi}."
    return q, fmt_frac(val), None


def indefinite_integral(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    if lvl < 2:
        deg = 1 + lvl * 2
        # coefficients (p + 1) * k keep the antiderivative's coefficients integers
        prim = [(d.between(-5, 5) if p < deg + 1 else d.nonzero(-5, 5), p) for p in range(deg + 1, 0, -1)]
        terms = [(k * p, p - 1) for k, p in prim]
        q_f, ans = fmt_poly(terms), fmt_poly(prim) + " + C"
    else:
        a, b = d.between(2, 6), d.between(2, 5)
        if d.between(0, 1):
            q_f, ans = f"{a * b}cos({b}x)", f"{a}sin({b}x) + C"
        else:
            q_f, ans = f"{a * b}e^({b}x)", f"{a}e^({b}x) + C"
    return f"Find the indefinite integral of {q_f} with respect to x. Include + C.", ans, None


FAMILIES: dict[str, Gen] = {
    "arithmetic": arithmetic,
    "fractions": fractions,
    "order_of_operations": order_of_operations,
    "linear_equation": linear_equation,
    "quadratic": quadratic,
    "linear_system": linear_system,
    "derivative": derivative,
    "definite_integral": definite_integral,
    "indefinite_integral": indefinite_integral,
    "word_problem": word_problem,
}


# family -> the form of its answers (see answer_form): what "the result" means there.
FORMS: dict[str, str] = {
    "arithmetic": "integer",
    "fractions": "fraction",  # the question asks for a reduced fraction
    "order_of_operations": "integer",
    "linear_equation": "number",
    "quadratic": "set[number]",
    "linear_system": "tuple[number]",
    "derivative": "expression",
    "definite_integral": "number",
    "indefinite_integral": "antiderivative",
    "word_problem": "integer",
}
MAX_DRAWS = 1000  # draws to find a problem of the asked split (eval: 5 expected)


def generate(family: str, level: str, rng: np.random.Generator, split: str | None = None) -> Problem:
    """One problem of ``family`` at ``level`` drawn with ``rng``; with ``split``, the first one
    drawn whose question hashes into that split."""
    lvl = LEVELS.index(level)
    for _ in range(MAX_DRAWS):
        question, answer, expr = FAMILIES[family](Draw(rng), lvl)
        where = hash_split(question)
        if split is None or where == split:
            return Problem(f"math/{family}/{problem_digest(question)}", question, answer, family, level, expr,
                           FORMS[family], where)
    raise ConfigError(f"no {split!r} problem of {family}/{level} in {MAX_DRAWS} draws")
