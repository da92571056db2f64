"""The form a final answer must have before it is compared: the result, not the question.

An equivalence checker says whether two expressions are equal; an answer checker must also say
whether the answer *is the result*. ``7 * (5 - 12)^2 + 30 / 5`` equals 349, but it restates the
question. Every math task has a form (``Problem.form``; a JSONL row's ``form``, else
:func:`infer` from its reference), and :func:`.verify.verify` checks it before equivalence:
an answer in another form earns 0 with the verdict ``not_final_form: <why>``. The rules are
checks on the parse tree of each value (:mod:`.expr` nodes), so they cost microseconds.

Elements (what one value must look like):

* ``integer``: a number literal (``349``, ``-12``, ``1,000``, ``349.0``): no operation left
  (``6/2``, ``7*49 + 6``).
* ``decimal``: an integer or decimal literal (``2.75``): no fraction, no operation.
* ``fraction``: an integer or ``p/q`` of integers in lowest terms with ``q > 1`` (``7/4``,
  ``-\\frac{7}{4}``, ``1 3/4``): not ``14/8``, not ``7/1``, not a decimal.
* ``number``: an integer, a decimal, or a fraction in lowest terms.
* ``complex``: ``a + bi`` with numbers ``a`` and ``b`` (either part may be left out).
* ``expression``: *evaluated*: no arithmetic left between numbers (``2*3``, ``2^3``,
  ``sqrt(4)``, ``6x/4``), no identity operation (``1*x``, ``x + 0``, ``x^1``, ``x/1``, ``--x``),
  coefficients multiplied out (``2*x*3``), like terms collected (``x + 2x``), square roots of
  integers without square factors (``sqrt(8)`` is ``2sqrt(2)``).
* ``expanded``: an evaluated expression with no product or power of a sum of variables left
  to multiply out (``(x + 1)(x - 2)``, ``(x + 1)^2``).
* ``factored``: an evaluated expression with at least as many non-constant factors as the
  reference (``x(x^2 - 1)`` is not ``x(x - 1)(x + 1)``), and not a sum where the reference
  is a product (``2x + 2`` is not ``2(x + 1)``); for a number, a product of primes and prime
  powers (``2 × 2 × 5 × 7^2``; ``980`` itself is the question).
* ``simplified``: an evaluated expression with no more nodes than the reference and, when the
  task gives its input expression, fewer than that (the input, or a copy of it rewritten
  without getting shorter, is not a simplification).
* ``antiderivative``: an evaluated expression, with or without ``+ C``.
* ``any``: no form (references that are text).

Shapes: ``set[E]`` (unordered values, roots), ``tuple[E]`` (ordered, ``(x, y)``) and
``interval`` (endpoints numbers or expressions, ``oo`` allowed; unions of intervals). Every
value inside is checked against the element; ``oo`` is always final. A value read from an
equation whose left side is not a variable (``x + y = 5`` as the answer ``5``) is the
question's equation, not a value.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from agentgym.environments.math.expr import ExprError, Node, free_symbols, to_str
from agentgym.environments.math.values import NotRational, eval_exact
from agentgym.errors import ConfigError

__all__ = ["ELEMENTS", "FORM_NAMES", "Form", "check_value", "infer_element", "parse_form"]

ELEMENTS: dict[str, str] = {
    "integer": "an integer",
    "decimal": "a decimal number",
    "fraction": "a fraction in lowest terms",
    "number": "a number (integer, decimal or fraction in lowest terms)",
    "complex": "a complex number a + bi",
    "expression": "an evaluated expression",
    "expanded": "an expanded expression",
    "factored": "a fully factored expression",
    "simplified": "a simplified expression",
    "antiderivative": "an antiderivative",
    "any": "any answer",
}
SHAPES = ("set", "tuple")
FORM_NAMES = (*ELEMENTS, "interval", *(f"{s}[{e}]" for s in SHAPES for e in ELEMENTS if e != "any"))
_INT_CONST = ("C", "c", "K")  # the constant of integration (as in verify)


@dataclass(frozen=True, slots=True)
class Form:
    shape: str  # "scalar" | "set" | "tuple" | "interval"
    element: str  # a key of ELEMENTS

    def __str__(self) -> str:
        if self.shape == "scalar":
            return self.element
        return "interval" if self.shape == "interval" else f"{self.shape}[{self.element}]"


_SPEC = re.compile(r"\s*([a-z]+)\s*(?:\[\s*([a-z]+)\s*\])?\s*")


@functools.lru_cache(maxsize=256)
def parse_form(spec: str) -> Form:
    """``"integer"``, ``"set[fraction]"``, ``"tuple[number]"``, ``"interval"`` -> a Form."""
    m = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if m is not None:
        name, inner = m.group(1), m.group(2)
        if inner is None and name == "interval":
            return Form("interval", "expression")
        if inner is None and name in ELEMENTS:
            return Form("scalar", name)
        if inner is not None and name in SHAPES and inner in ELEMENTS and inner != "any":
            return Form(name, inner)
    hint = difflib.get_close_matches(str(spec), FORM_NAMES, n=1)
    raise ConfigError(f"unknown answer form {spec!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                      + f" Forms: {', '.join(ELEMENTS)}, interval, set[E], tuple[E]")


# ---------------------------------------------------------------------------- literals
def _lit(n: Node) -> Fraction | None:
    """The value of a number literal (``3``, ``-2.5``), else None."""
    if n[0] == "num":
        return n[1]  # type: ignore[no-any-return]
    if n[0] == "neg" and n[1][0] == "num":
        return -n[1][1]  # type: ignore[no-any-return]
    return None


def _ratio(n: Node) -> tuple[int, int] | None:
    """``p/q`` written with two integer literals (a sign inside or outside), else None."""
    sign = 1
    if n[0] == "neg":
        sign, n = -1, n[1]
    if n[0] != "div":
        return None
    p, q = _lit(n[1]), _lit(n[2])
    if p is None or q is None or p.denominator != 1 or q.denominator != 1:
        return None
    return sign * int(p), int(q)


def _decimal(v: Fraction) -> str:
    """A decimal literal's value as it was most likely written (``1.75``)."""
    d = Decimal(v.numerator) / Decimal(v.denominator)
    return format(d.normalize(), "f") if d * v.denominator == v.numerator else f"{v.numerator}/{v.denominator}"


def _is_oo(n: Node) -> bool:
    return n == ("const", "oo") or n == ("neg", ("const", "oo"))


def _number(n: Node, element: str) -> str | None:
    """Why ``n`` is not a number literal of ``element`` ("integer"/"decimal"/"fraction"/"number")."""
    want = ELEMENTS[element]
    v = _lit(n)
    if v is not None:
        if v.denominator != 1 and element == "fraction":
            return f"{_decimal(v)} is a decimal; the task asks for {want}"
        return None
    pq = _ratio(n)
    if pq is not None:
        p, q = pq
        if element in ("integer", "decimal"):
            return f"{p}/{q} is a division left to do; the task asks for {want}"
        if q <= 0:
            return f"{p}/{q} has a negative or zero denominator; write the sign in front"
        g = math.gcd(p, q)
        if q == 1 or g != 1:
            lowest = str(p // g) if q == g else f"{p // g}/{q // g}"
            return f"{p}/{q} is not in lowest terms ({lowest}); the task asks for {want}"
        return None
    if n[0] in ("sym", "const", "fn"):
        return f"{to_str(n)} is not {want}"
    return f"{to_str(n)} has operations left to do; the task asks for {want}, not an expression"


# ---------------------------------------------------------------------------- tree views
def _terms(n: Node, sign: int = 1, out: list[tuple[int, Node]] | None = None) -> list[tuple[int, Node]]:
    """The terms of a sum with their signs (``a - (b + c)`` -> a, -b, -c)."""
    out = [] if out is None else out
    if n[0] == "add":
        _terms(n[1], sign, out)
        _terms(n[2], sign, out)
    elif n[0] == "sub":
        _terms(n[1], sign, out)
        _terms(n[2], -sign, out)
    elif n[0] == "neg" and n[1][0] in ("add", "sub"):
        _terms(n[1], -sign, out)
    else:
        out.append((sign, n))
    return out


def _factors(n: Node, num: list[Node], den: list[Node]) -> int:
    """Split a product into numerator and denominator factors; returns the count of negations."""
    op = n[0]
    if op == "mul":
        return _factors(n[1], num, den) + _factors(n[2], num, den)
    if op == "div":
        return _factors(n[1], num, den) + _factors(n[2], den, num)
    if op == "neg":
        return 1 + _factors(n[1], num, den)
    num.append(n)
    return 0


def _is_sum(n: Node) -> bool:
    while n[0] == "neg":
        n = n[1]
    return n[0] in ("add", "sub")


def size(n: Node) -> int:
    """Nodes in the tree (the measure of ``simplified``)."""
    return 1 + sum(size(c) for c in n[1:] if isinstance(c, tuple))


def _term_key(n: Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A term without its numeric coefficient: like terms share it (``3x^2`` and ``-x^2``)."""
    num: list[Node] = []
    den: list[Node] = []
    _factors(n, num, den)
    return (tuple(sorted(to_str(f) for f in num if _lit(f) is None)),
            tuple(sorted(to_str(f) for f in den if _lit(f) is None)))


def _square_factor(k: int) -> int:
    """The largest square dividing ``k`` (small ``k`` only; 1 when there is none to find cheaply)."""
    best, d = 1, 2
    while d * d <= k and d <= 1000:
        while k % (d * d) == 0:
            k //= d * d
            best *= d * d
        d += 1
    return best


# ---------------------------------------------------------------------------- evaluated
def _evaluated(n: Node, parent: str = "") -> str | None:
    """Why ``n`` is not an evaluated expression (see the module docstring), else None."""
    op = n[0]
    if op in ("num", "sym", "const"):
        return None
    if not free_symbols(n) and _lit(n) is None and _ratio(n) is None:
        try:
            v = eval_exact(n)
        except (NotRational, ExprError, ZeroDivisionError, OverflowError):
            pass
        else:
            shown = str(v) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
            return f"{to_str(n)} is arithmetic left to do (it is {shown})"
    if op == "neg" and n[1][0] == "neg":
        return f"{to_str(n)} negates twice"
    if op == "pow":
        e = _lit(n[2])
        if e is not None and e in (0, 1):
            return f"{to_str(n)} raises to the power {e}"
    if op == "fn" and n[1] == "sqrt":
        r = _lit(n[2])
        if r is not None and r.denominator == 1 and r > 1 and _square_factor(int(r)) > 1:
            s = math.isqrt(_square_factor(int(r)))
            return f"{to_str(n)} is {s}sqrt({int(r) // (s * s)})"
    if op in ("mul", "div", "neg") and parent not in ("mul", "div", "neg"):
        why = _product(n)
        if why:
            return why
    if op in ("add", "sub", "neg") and parent not in ("add", "sub") and (op != "neg" or _is_sum(n)):
        why = _sum(n)
        if why:
            return why
    for c in n[1:]:
        if isinstance(c, tuple):
            why = _evaluated(c, op)
            if why:
                return why
    return None


def _product(n: Node) -> str | None:
    num: list[Node] = []
    den: list[Node] = []
    _factors(n, num, den)
    lit_num = [v for v in map(_lit, num) if v is not None]
    lit_den = [v for v in map(_lit, den) if v is not None]
    if (len(num) > 1 and any(abs(v) == 1 for v in lit_num)) or any(abs(v) == 1 for v in lit_den):  # 1/x is fine
        return f"{to_str(n)} multiplies or divides by 1"
    if any(v == 0 for v in lit_num) and len(num) + len(den) > 1:
        return f"{to_str(n)} multiplies by 0"
    if len(lit_num) > 1 or len(lit_den) > 1:
        return f"{to_str(n)} has numbers left to multiply"
    if lit_num and lit_den:
        a, b = lit_num[0], lit_den[0]
        if a.denominator == 1 and b.denominator == 1 and math.gcd(int(a), int(b)) > 1:
            return f"{to_str(n)} has a coefficient not in lowest terms"
    return None


def _sum(n: Node) -> str | None:
    terms = _terms(n)
    lits = [t for _, t in terms if _lit(t) is not None or _ratio(t) is not None]
    if any(_lit(t) == 0 for t in lits) and len(terms) > 1:
        return f"{to_str(n)} adds 0"
    if len(lits) > 1:
        return f"{to_str(n)} has numbers left to add"
    keys = Counter(_term_key(t) for _, t in terms if _lit(t) is None and _ratio(t) is None)
    twice = [k for k, c in keys.items() if c > 1]
    if twice:
        return f"{to_str(n)} has like terms left to collect ({'*'.join(twice[0][0]) or '1'})"
    return None


# ---------------------------------------------------------------------------- symbolic families
def _drop_c(n: Node) -> Node:
    if n[0] == "add" and n[2][0] == "sym" and n[2][1] in _INT_CONST:
        return n[1]  # type: ignore[no-any-return]
    if n[0] == "add" and n[1][0] == "sym" and n[1][1] in _INT_CONST:
        return n[2]  # type: ignore[no-any-return]
    return n


def _unexpanded(n: Node) -> str | None:
    op = n[0]
    if op == "mul" and any(_is_sum(c) and free_symbols(c) for c in n[1:3]):
        return f"{to_str(n)} is a product left to expand"
    if op == "pow" and _is_sum(n[1]) and free_symbols(n[1]):
        e = _lit(n[2])
        if e is not None and e.denominator == 1 and e >= 2:
            return f"{to_str(n)} is a power left to expand"
    for c in n[1:]:
        if isinstance(c, tuple):
            why = _unexpanded(c)
            if why:
                return why
    return None


def factor_count(n: Node) -> int:
    """Non-constant factors with multiplicity: ``x(x - 1)^2`` is 3, ``x^2 - 1`` is 1."""
    op = n[0]
    if not free_symbols(n):
        return 0
    if op == "neg":
        return factor_count(n[1])
    if op == "mul":
        return factor_count(n[1]) + factor_count(n[2])
    if op == "div":
        return factor_count(n[1])
    if op == "pow":
        e = _lit(n[2])
        if e is not None and e.denominator == 1 and e >= 1:
            return int(e) * factor_count(n[1])
    return 1


def _element(n: Node, element: str, reference: Node | None, given: Node | None) -> str | None:
    if element == "any" or _is_oo(n):
        return None
    if element in ("integer", "decimal", "fraction", "number"):
        return _number(n, element)
    if element == "complex":
        return _complex(n)
    if element == "factored" and not free_symbols(n) and (reference is None or not free_symbols(reference)):
        return _prime_factors(n)
    body = _drop_c(n) if element == "antiderivative" else n
    why = _evaluated(body)
    if why or element in ("expression", "antiderivative"):
        return why
    if element == "expanded":
        return _unexpanded(n)
    if element == "factored":
        if reference is not None:
            want, got = factor_count(reference), factor_count(n)
            if got < want:
                return f"{to_str(n)} has {got} non-constant factor(s); fully factored it has {want}"
            if _is_sum(n) and not _is_sum(reference):
                return f"{to_str(n)} is a sum, not a product of factors"
        return None
    # simplified
    if reference is not None and size(n) > size(reference):
        return f"{to_str(n)} is longer ({size(n)} nodes) than the simplified form ({size(reference)})"
    if given is not None and size(n) >= size(given):
        return f"{to_str(n)} is no shorter than the expression to simplify"
    return None


def _is_prime(k: int) -> bool:
    """Deterministic Miller-Rabin (exact below 3.3e24; literals are at most 200 digits)."""
    if k < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if k in small:
        return True
    if any(k % q == 0 for q in small):
        return False
    d, r = k - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in small:
        x = pow(a, d, k)
        if x in (1, k - 1):
            continue
        for _ in range(r - 1):
            x = x * x % k
            if x == k - 1:
                break
        else:
            return False
    return True


def _prime_factors(n: Node) -> str | None:
    """Why ``n`` is not a product of primes (``2 × 2 × 5 × 7^2``): the factored form of a number."""
    num: list[Node] = []
    den: list[Node] = []
    negs = _factors(n, num, den)
    if den or negs:
        return f"{to_str(n)} is not a product of primes"
    for f in num:
        base, e = (f[1], _lit(f[2])) if f[0] == "pow" else (f, Fraction(1))
        v = _lit(base)
        if v is None or v.denominator != 1 or e is None or e.denominator != 1 or e < 1 or not _is_prime(int(v)):
            return f"{to_str(n)} is not a product of primes ({to_str(f)} is not a prime or a power of one)"
    return None


def _complex(n: Node) -> str | None:
    real = imag = 0
    for _, t in _terms(n):
        num: list[Node] = []
        den: list[Node] = []
        _factors(t, num, den)
        i_count = sum(f == ("const", "i") for f in num)
        rest = [f for f in num if f != ("const", "i")]
        if i_count > 1 or any(f == ("const", "i") for f in den) \
                or any(_lit(f) is None for f in rest + den) or len(rest) > 1 or len(den) > 1:
            return f"{to_str(n)} is not of the form a + bi with numbers a and b"
        if i_count:
            imag += 1
        else:
            real += 1
            why = _number(t, "number")
            if why:
                return why
    if real > 1 or imag > 1:
        return f"{to_str(n)} has parts left to add; write a + bi"
    return None


def check_value(n: Node, element: str, *, reference: Node | None = None, given: Node | None = None) -> str | None:
    """Why the value ``n`` is not in form ``element`` (None when it is). ``reference``: the
    reference value (factored, simplified); ``given``: the question's expression, which an
    answer may never restate."""
    if given is not None and n == given and element != "any":
        return f"{to_str(n)} restates the question's expression"
    return _element(n, element, reference, given)


def infer_element(n: Node) -> str:
    """The element a reference value is written in: ``number`` for number literals, ``complex``
    for ``a + bi``, ``antiderivative`` with a ``+ C``, else ``expression``."""
    if _number(n, "number") is None:
        return "number"
    if n[0] in ("mul", "pow") and _prime_factors(n) is None:
        return "factored"
    if ("const", "i") in _leaves(n) and _complex(n) is None:
        return "complex"
    if _drop_c(n) is not n:
        return "antiderivative"
    return "expression"


def _leaves(n: Node) -> list[Node]:
    if n[0] in ("num", "sym", "const"):
        return [n]
    return [x for c in n[1:] if isinstance(c, tuple) for x in _leaves(c)]
