"""Is a predicted answer the reference's result? ``verify(pred, ref, form)``.

With a ``form`` (:mod:`.answer_form`), the answer must first *be the result*, written as the
task asks (a number where a number is asked, a fraction in lowest terms, an evaluated
expression...): the question restated earns ``not_final_form: <why>`` whatever its value.
Then equivalence decides. The rules (also in docs/rewards.md):

* **Plain statements.** A negation of the answer's value (``the answer is not 3``, ``\\ne 3``,
  ``\\text{not } 3``, ``other than 3``, ``anything except 3``, ``neither 3``, ``unequal to
  3``) is ``negated``, a bound (``at least 3``, ``more than 3``) ``bound``, a hedge (``3, or
  maybe 4``) ``hedged``: refused, never stripped. An unknown LaTeX command (``\\lfloor``,
  ``\\Gamma``, ``\\operatorname{foo}``) is ``unparseable``, never dropped.
* **Self-corrections.** The value after the last correction is the answer: ``3, no wait, 4``
  and ``3. Actually, 4`` state 4 (never 3).
* **The question is not an answer.** With ``question``, the question's text is cut out of the
  message before the answer is read, and an answer quoted from it (``from x = 0 to x = 4``)
  is ``echoed``: restating the question earns 0 whatever number ends it.

* **Extraction.** The last ``\\boxed{}`` wins; else the last ``$...$`` / ``\\(...\\)`` segment;
  else the text after "answer is". ``x = 3`` means 3; a trailing unit or word is dropped
  ("3 apples", "12 cm", ``3 \\text{ apples}``); ``1,000`` means 1000 when a single number is
  expected (``0,064`` is no grouping: a group never starts with 0).
* **Marks, one reading per task.** ``50\\%`` means 50 where the other side is a whole number
  ("what percent ...", reference 50) and 1/2 where it is not (reference 0.5 or 1/2); ``30°``
  likewise 30 or pi/6. The reference decides, so one answer never matches two values:
  ``6400%`` is 6400 for the reference 6400 and not 64.
* **Shapes.** ``(a, b)`` and ``[a, b)`` are ordered and their brackets must match (tuples,
  intervals; ``oo`` allowed); ``{a, b}``, ``a, b`` and ``x = a or x = b`` are unordered
  (roots in any order); ``x = 3, y = 4`` is the tuple ordered by variable name;
  ``A \\cup B`` is an unordered union of intervals; ``a \\pm b`` is the two values.
* **Numbers.** Decimals are exact rationals: ``0.5 == 1/2``, ``3.14 != pi``,
  ``0.333 != 1/3``. Only a *decimal reference* carries a precision, and only an exact
  non-decimal prediction is rounded to it: ``1/3`` and ``pi`` match the references ``0.333``
  and ``3.14``; the decimal ``0.33`` does not match ``0.333`` (two decimals compare exactly).
* **Expressions.** Identical text, identical parse trees and exact rational arithmetic first
  (microseconds; no sympy). Otherwise sympy decides (:mod:`.symbolic`): the parse trees are
  built into sympy objects (never from strings), ``d = a - b`` is tested symbolically with
  bounded ``expand`` / ``cancel`` / ``radsimp`` (``0``: equal; a nonzero rational: not), and
  when that is inconclusive ``a.evalf(50, subs=point)`` and ``b.evalf(50, subs=point)`` must
  agree to 30 significant digits of ``max(1, |a|, |b|)`` at four of six fixed points in
  [0.6, 2.3] (the random-point test sympy's ``Expr.equals`` falls back to), unless sympy's
  adaptive evalf certifies ``d`` nonzero there: ``4 + e^-200`` is not 4. A reference
  containing ``+ C`` accepts any antiderivative: the difference must be constant.
* **Bounds.** Inputs over 100,000 characters, answers over 2,000, nesting deeper than 60,
  powers beyond 100,000 bits and values beyond 10**10000 are rejected with a reason, in
  bounded time, in any thread (no signals, no ``eval``); :mod:`.symbolic` adds the bounds
  on what sympy is given.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from fractions import Fraction

from agentgym.environments.math import forms
from agentgym.environments.math.answer_form import Form, check_value, infer_element, parse_form
from agentgym.environments.math.expr import (
    CONSTANTS,
    FUNCTIONS,
    MAX_CHARS,
    MAX_DEPTH,
    ExprError,
    Node,
    TooLarge,
    free_symbols,
    parse,
    to_str,
)
from agentgym.environments.math.latex import (
    extract,
    extract_with_lead,
    max_depth,
    split_top,
    strip_lead,
    strip_text,
    to_plain,
)
from agentgym.environments.math.symbolic import equal as symbolic_equal
from agentgym.environments.math.values import NotRational, eval_exact, eval_mp, mp_context

__all__ = ["MAX_INPUT", "Verdict", "infer_form", "reference_form_problem", "verify"]

MAX_INPUT = 100_000  # characters of a whole final message
MAX_ITEMS = 50  # elements of a set / tuple / list

_LIST_SEPS = (",", ";", " or ", " and ", "\\text{ or }", "\\text{ and }", "\\quad", "\\qquad")
_KNOWN_WORDS = {w.lower() for w in FUNCTIONS | set(CONSTANTS)}
_CURRENCY = re.compile(r"\\\$|[$€£¥₹]|\\(?:euro|pounds|yen)\b|\b(?:US\$|USD|EUR|GBP|JPY|INR)\b")
LONG_DECIMAL = 10  # significant digits from which a decimal is a float rendering (see _long_close)
_DECIMAL = re.compile(r"[-+]?\d*\.(\d+)")  # fullmatch only: a search would rescan digit runs
_HAS_DECIMAL = re.compile(r"\.\d")
_VAR = re.compile(r"[A-Za-z](?:_\w+)?|[A-Za-z]\([A-Za-z]\)|[A-Za-z]'+(?:\([A-Za-z]\))?|d[a-z]/d[a-z]")
_INEQ = re.compile(r"[<>]|!=|\\[lg](?:eq?|t)(?![a-z])|\\neq|≤|≥|≠")
_INT_CONST = ("C", "c", "K")


@dataclass(frozen=True, slots=True)
class Verdict:
    correct: bool
    reason: str  # why, for info and logs: "equivalent", "not equivalent: ...", "unparseable: ..."
    parsed: str | None  # the prediction as understood, None when nothing could be parsed


@dataclass(slots=True)
class _Ans:
    kind: str  # "scalar" | "seq" (ordered, with brackets) | "set" | "list" (unordered) | "union"
    node: Node | None = None  # scalar
    text: str = ""  # scalar: the plain text it was parsed from (for the decimal rule)
    items: list[_Ans] = field(default_factory=list)
    brackets: str = ""  # seq: "()", "[)", ...
    bare: bool = False  # seq or list written without brackets ("3, 4", "x = 3, y = 4")
    mark: str | None = None  # scalar: "%" or "°" written after it (forms.mark)
    unitless: Node | None = None  # scalar: the number before a unit ("5 m" -> 5), forms.without_unit
    equation: str | None = None  # read from "lhs = value" whose lhs has variables but is none ("x + y = 5")

    def __str__(self) -> str:
        if self.kind == "scalar":
            assert self.node is not None
            return to_str(self.node)
        inner = ", ".join(str(i) for i in self.items)
        if self.kind == "seq":
            return self.brackets[0] + inner + self.brackets[1]
        if self.kind == "union":
            return " U ".join(str(i) for i in self.items)
        return "{" + inner + "}"


# ---------------------------------------------------------------------------- structure
def _squash(s: str) -> str:
    return "".join(s.split()).replace("\\left", "").replace("\\right", "")


_ALPHA = re.compile(r"[A-Za-z]")
_CHOOSE = re.compile(r"\{([^{}]*)\\choose([^{}]*)\}")


def _rewrite(s: str) -> str:
    """Written forms into the grammar (see :mod:`.forms`): prose, number words, currency, matrices."""
    if "\\choose" in s:
        s = _CHOOSE.sub(r"\\binom{\1}{\2}", s)
    if _ALPHA.search(s) is not None:
        s = forms.prose(forms.number_words(forms.corrected(s)), _KNOWN_WORDS)
    if "\\begin" in s:
        s = forms.matrices(s)
    return _CURRENCY.sub("", s).strip()


def _structure(s: str, expect_scalar: bool) -> _Ans:
    s = strip_lead(s.strip().replace("∪", "\\cup"))
    if not s:
        raise ExprError("empty answer")
    if expect_scalar:
        s = forms.grouped(s) or s  # 1,000 / 1 000 / 1.000.000 / 1'000: one number
    parts = [p for p in split_top(s, _LIST_SEPS) if p.strip()]
    if len(parts) > MAX_ITEMS:
        raise TooLarge(f"more than {MAX_ITEMS} items")
    if len(parts) > 1:
        pairs = [_assignment(p) for p in parts]
        names = [v for v, _ in pairs]
        if all(names) and len(set(names)) == len(names):  # x = 3, y = 4 -> (3, 4)
            ordered = [a for _, a in sorted(pairs, key=lambda va: str(va[0]))]
            return _Ans("seq", items=ordered, brackets="()", bare=True)
        return _Ans("list", items=[a for _, a in pairs], bare=True)
    if _INEQ.search(s):
        return _inequality(s)
    eqs = split_top(s, ("=",))
    if len(eqs) > 1:
        out = _structure(eqs[-1], expect_scalar)
        lhs = [e for e in eqs[:-1] if _ALPHA.search(e) and not _is_name(e)]  # "7*49 + 6 = 349" is work shown
        if lhs:
            out.equation = lhs[0].strip()
        return out
    unions = split_top(s, ("\\cup", " U "))
    if len(unions) > 1:
        items = [_structure(u, False) for u in unions]
        if any(i.kind != "seq" or len(i.items) != 2 for i in items):
            raise ExprError("a union must join intervals such as (a, b) or [a, b]")
        return _Ans("union", items=items)
    inner = _enclosed(s, ("\\{", "\\}")) or _enclosed(s, ("{", "}"))
    if inner is not None:
        return _Ans("set", items=[_structure(p, False) for p in split_top(inner, (",",)) if p.strip()])
    if s[0] in "([" and s[-1] in ")]" and _enclosed(s, (s[0], s[-1])) is not None:
        elems = split_top(s[1:-1], (",",))
        if len(elems) >= 2:
            return _Ans("seq", items=[_structure(p, False) for p in elems], brackets=s[0] + s[-1])
    s, mark = forms.mark(s)
    s = forms.mixed_number(s) or s
    latex_free = to_plain(s)
    plain = strip_text(latex_free)
    if "+-" in plain or "-+" in plain:  # a \pm b: both values, also inside a fraction
        sign = "+-" if "+-" in plain else "-+"
        return _Ans("list", items=[_scalar(plain.replace(sign, "+", 1)),
                                   _scalar(plain.replace(sign, "-", 1))])
    out = _scalar(plain)
    out.mark = mark
    number = forms.without_unit(latex_free.strip())
    if number is not None:
        try:
            out.unitless = parse(number)
        except ExprError:
            pass
    return out


_CMP = re.compile(r"(<=|>=|<|>)")


def _inequality(s: str) -> _Ans:
    """``x > 3``, ``3 <= x``, ``1 < x \\le 2`` as the interval they describe."""
    parts = [p.strip() for p in _CMP.split(to_plain(s))]
    if len(parts) not in (3, 5) or "!=" in s or "\\neq" in s:
        raise ExprError("only inequalities such as x > 3 or 1 < x <= 2 are supported")
    if len(parts) == 5:
        a, op1, var, op2, b = parts
        if not _VAR.fullmatch(var) or (op1[0] != op2[0]):
            raise ExprError("a double inequality must read a < x < b or a > x > b")
        if op1[0] == ">":
            a, b, op1, op2 = b, a, op2.replace(">", "<"), op1.replace(">", "<")
        return _Ans("seq", items=[_scalar(a), _scalar(b)],
                    brackets=("[" if op1 == "<=" else "(") + ("]" if op2 == "<=" else ")"))
    lhs, op, rhs = parts
    if _VAR.fullmatch(rhs) and not _VAR.fullmatch(lhs):  # 3 < x  ->  x > 3
        lhs, rhs, op = rhs, lhs, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}[op]
    if not _VAR.fullmatch(lhs):
        raise ExprError("an inequality must compare a variable with a value, e.g. x > 3")
    closed = op.endswith("=")
    if op.startswith(">"):
        return _Ans("seq", items=[_scalar(rhs), _scalar("oo")], brackets=("[" if closed else "(") + ")")
    return _Ans("seq", items=[_scalar("-oo"), _scalar(rhs)], brackets="(" + ("]" if closed else ")"))


def _scalar(plain: str) -> _Ans:
    return _Ans("scalar", node=parse(plain), text=plain)


def _enclosed(s: str, pair: tuple[str, str]) -> str | None:
    """The inside of ``s`` when its first bracket closes at its very end."""
    o, c = pair
    if not (s.startswith(o) and s.endswith(c)) or len(s) < len(o) + len(c):
        return None
    k = len(o) - 1  # the bracket character itself ("{" of "\{")
    d = 0
    for j in range(k, len(s)):
        ch = s[j]
        if ch in "([{":
            d += 1
        elif ch in ")]}":
            d -= 1
            if d == 0:
                return s[len(o) : -len(c)] if j == len(s) - 1 else None
    return None


def _assignment(part: str) -> tuple[str | None, _Ans]:
    eqs = split_top(part, ("=",))
    if len(eqs) > 1 and not _INEQ.search(part):
        lhs = eqs[0].strip()
        out = _structure(eqs[-1], True)
        if _ALPHA.search(lhs) and not _is_name(lhs):
            out.equation = lhs
        return (lhs if _VAR.fullmatch(lhs) else None), out
    return None, _structure(part, True)


def _is_name(lhs: str) -> bool:
    """``x``, ``y'``, ``f(x)``, ``x_1``, ``dy/dx`` (also as LaTeX): the left side of an answer
    ``x = 3``, not of the question's equation (``x + y = 5``)."""
    t = lhs.strip()
    if _VAR.fullmatch(t):
        return True
    try:
        plain = _squash(to_plain(t)).replace("(", "").replace(")", "")
    except ExprError:
        return False
    return _VAR.fullmatch(plain) is not None


# ---------------------------------------------------------------------------- comparison
def _is_oo(n: Node) -> int:
    if n[0] == "const" and n[1] == "oo":
        return 1
    if n[0] == "neg" and n[1][0] == "const" and n[1][1] == "oo":
        return -1
    return 0


def _drop_constant(n: Node) -> tuple[Node, bool]:
    """Remove a top-level ``+ C`` (constant of integration); say whether there was one."""
    if n[0] == "add" and n[2][0] == "sym" and n[2][1] in _INT_CONST:
        return n[1], True
    if n[0] == "add" and n[1][0] == "sym" and n[1][1] in _INT_CONST:
        return n[2], True
    return n, False


def _reading(a: _Ans, node: Node, other: Node) -> Node:
    """What a marked number means against the unmarked ``other``: one reading, never two. Where
    ``other`` is a whole number the mark is the unit the question asked in ("what percent",
    "how many degrees": 50% is 50, 30° is 30); elsewhere it is a value (50% is 1/2, 30° is
    pi/6). So ``6400%`` is 6400 against the reference 6400 and 64 against no whole number."""
    try:
        whole = eval_exact(other).denominator == 1
    except (NotRational, ExprError, ZeroDivisionError, OverflowError, ValueError):
        whole = False
    if whole:
        return node
    if a.mark == "%":
        return ("div", node, ("num", Fraction(100)))
    return ("mul", node, ("div", ("const", "pi"), ("num", Fraction(180))))


def _scalars_equal(p: _Ans, r: _Ans) -> bool:
    pn, rn = p.node, r.node
    assert pn is not None and rn is not None
    # A unit is not graded against a plain number: "5 m" is 5 when the other side is 5.
    if p.unitless is not None and free_symbols(pn) and not free_symbols(rn):
        pn = p.unitless
    elif r.unitless is not None and free_symbols(rn) and not free_symbols(pn):
        rn = r.unitless
    if p.mark == r.mark:
        return _values_equal(p, r, pn, rn)
    if p.mark and r.mark:
        return False  # 30% is not 30°
    if p.mark:
        return _values_equal(p, r, _reading(p, pn, rn), rn)
    return _values_equal(p, r, pn, _reading(r, rn, pn))


def _long_close(dec: str, exact: Node) -> bool | None:
    """A long decimal (a printout such as 0.3333333333 or 0.30000000000000004) against an exact
    value: equal when it is that value rounded or truncated to its printed places, or within
    double precision's relative error (4e-16, the noise in a float's last digits). None when
    the rule does not apply (fewer than LONG_DECIMAL significant digits, symbols)."""
    if forms.long_decimal_digits(dec) < LONG_DECIMAL or free_symbols(exact):
        return None
    try:
        v = eval_mp(exact, {})
        d = eval_mp(parse(dec), {})
    except (ExprError, ZeroDivisionError, ValueError, OverflowError):
        return None
    v = +v  # a constant (pi) as a number of the context
    if getattr(v, "imag", 0) != 0:
        return False  # a complex value is no decimal
    ulp = mp_context().mpf(10) ** -len(dec.strip().split(".")[1])
    err = abs(d - v)
    rounded = err <= ulp / 2 * (1 + 1e-9)
    truncated = abs(d) <= abs(v) < abs(d) + ulp and (d >= 0) == (v >= 0)
    return bool(rounded or truncated or err <= 4e-16 * abs(v))


def _values_equal(p: _Ans, r: _Ans, pn: Node, rn: Node) -> bool:
    if pn == rn:
        return True
    oo_p, oo_r = _is_oo(pn), _is_oo(rn)
    if oo_p or oo_r:
        return oo_p == oo_r
    p_dec, r_dec = _HAS_DECIMAL.search(p.text) is not None, _DECIMAL.fullmatch(r.text.strip())
    if p_dec != (r_dec is not None) and pn is p.node and rn is r.node:
        close = _long_close(p.text, rn) if p_dec else _long_close(r.text, pn)
        if close is not None:
            return close
    dec = r_dec
    # Only an exact (non-decimal) prediction is rounded to a decimal reference's precision.
    places = len(dec.group(1)) if dec and not p_dec else None
    rn, has_c = _drop_constant(rn)
    if has_c:
        pn = _drop_constant(pn)[0]
    try:  # exact rational arithmetic: microseconds, decides all plain numbers
        ep, er = eval_exact(pn), eval_exact(rn)
        return ep == er or places is not None and abs(ep - er) * 2 * 10**places <= 1
    except NotRational:
        pass
    return symbolic_equal(pn, rn, has_c=has_c, places=places)


def _equal(p: _Ans, r: _Ans) -> bool:
    if r.kind == "scalar":
        if p.kind == "scalar":
            return _scalars_equal(p, r)
        return p.kind in ("list", "set") and len(p.items) == 1 and _equal(p.items[0], r)
    if r.kind == "seq":
        # "3, 4" and "x = 3, y = 4" stand for the tuple (3, 4), never for an interval [3, 4];
        # with three or more items (no interval has them) (a, b, c), [a, b, c] and a, b, c
        # are the same ordered list
        lists = len(r.items) >= 3 and r.brackets in ("()", "[]")
        same_shape = (p.kind == "seq" and (p.brackets == r.brackets or lists and p.brackets in ("()", "[]"))
                      or p.bare and (r.brackets == "()" or lists))
        return (same_shape and len(p.items) == len(r.items)
                and all(_equal(a, b) for a, b in zip(p.items, r.items)))
    if r.kind in ("set", "list"):
        if p.kind == "scalar":
            return all(_equal(p, b) for b in r.items)
        if p.kind == "seq" and r.bare and len(p.items) >= 3 and p.brackets in ("()", "[]"):
            return _same_elements(p.items, r.items)  # [1, 2, 3] for the bare 1, 2, 3
        if p.kind not in ("set", "list") and not p.bare:
            return False
        return _same_elements(p.items, r.items)
    return p.kind == "union" and _same_elements(p.items, r.items)


def _same_elements(ps: list[_Ans], rs: list[_Ans]) -> bool:
    """Set equality: every predicted element is some reference element and vice versa."""
    matched = [False] * len(rs)
    for a in ps:
        hit = False
        for j, b in enumerate(rs):
            if _equal(a, b):
                matched[j] = hit = True
        if not hit:
            return False
    return all(matched)


_PLAIN = re.compile(r"[-+]?(?:\d+(\.\d*)?|\.\d+)(?:/[1-9]\d*)?")


def _plain_numbers(p: str, r: str) -> bool | None:
    """Both sides plain numbers (``3``, ``-0.5``, ``2/4``): the verdict by exact arithmetic,
    with the decimal rules of the full path (None when those need it: a decimal reference
    with an exact prediction, a long decimal against an exact value)."""
    if len(p) > 40 or len(r) > 40 or not (_PLAIN.fullmatch(p) and _PLAIN.fullmatch(r)):
        return None
    p_dec, r_dec = "." in p, "." in r
    if r_dec and not p_dec or p_dec and not r_dec and forms.long_decimal_digits(p) >= LONG_DECIMAL:
        return None
    try:
        return Fraction(p) == Fraction(r)
    except (ValueError, ZeroDivisionError):
        return None


@functools.lru_cache(maxsize=4096)
def _reference(reference: str) -> tuple[str, str, _Ans | None, str]:
    """The reference as extracted, as rewritten, and structured (None and the reason when it
    is not math). Cached: one task's reference is checked against many sampled answers."""
    raw = extract(reference)
    r = _rewrite(raw) if len(raw) <= MAX_CHARS else raw
    try:
        return raw, r, _structure(r, True), ""
    except (ExprError, RecursionError) as e:
        return raw, r, None, str(e)


def verify(predicted: str, reference: str, form: str | Form | None = None,
           given: str | None = None, question: str | None = None) -> Verdict:
    """Decide whether ``predicted`` (a final message) states the answer ``reference``.

    ``form`` (a name of :mod:`.answer_form`, e.g. ``"integer"`` or ``"set[fraction]"``): the
    form the answer must have, checked *before* equivalence; an answer in another form gets
    ``not_final_form: <why>``. None checks equivalence only. ``given``: the question's own
    expression, which an answer may never restate. ``question``: the task's question, cut
    out of the message before the answer is read (an echo of it earns 0). Never raises on content; unparseable or
    hostile input gives ``correct=False`` and a reason (an unknown ``form`` name is a
    :class:`ConfigError`: the caller's mistake).
    """
    if not isinstance(predicted, str) or not isinstance(reference, str):
        return Verdict(False, "bad_input: expected two strings", None)
    spec = parse_form(form) if isinstance(form, str) else form
    if predicted.strip() == reference.strip():  # the common case: microseconds
        return Verdict(True, "equivalent: identical text", reference.strip())
    if len(predicted) > MAX_INPUT:
        return Verdict(False, f"too_long: the answer has {len(predicted)} characters; "
                       f"at most {MAX_INPUT}", None)
    if question:
        predicted = _without_question(predicted, question)
        if not predicted.strip():
            return Verdict(False, f"{_ECHOED}; state its result", None)
    p, lead = extract_with_lead(predicted)
    if not p:
        return Verdict(False, "unparseable: no answer found in the final message", None)
    if len(p) > MAX_CHARS:  # before any further pass over it
        return Verdict(False, f"too_large: the answer has {len(p)} characters; at most {MAX_CHARS}", None)
    r_raw, r, ref, why = _reference(reference)
    # A quote of the question is no value; a text answer may well be one of its words ("Answer
    # red or dark green": "dark green").
    if question and ref is not None and _quotes(p, question):
        return Verdict(False, f"{_ECHOED} ({p!r} is quoted from it); state its result", None)
    if ref is not None:
        hedge = _hedged(p, lead)
        if hedge:
            return Verdict(False, hedge, None)
    plain = _plain_numbers(p, r_raw)
    if plain is not None:  # two plain numbers: exact arithmetic, no parsing
        bad = _plain_form(p, spec) if plain and spec is not None else None
        if bad:
            return Verdict(False, f"not_final_form: {bad}", p)
        return Verdict(plain, "equivalent" if plain else f"not equivalent: got {p}, expected {r_raw}", p)
    if _squash(p) == _squash(r_raw):
        return Verdict(True, "equivalent: same answer text", p)
    if len(p) <= MAX_CHARS:
        p = _rewrite(p)
        if not p:
            return Verdict(False, "unparseable: no answer found in the final message", None)
        hedge = _hedged(p, whole=True) if ref is not None else None
        if hedge:
            return Verdict(False, hedge, None)
        if _squash(p) == _squash(r):
            return Verdict(True, "equivalent: same answer text", p)
    if len(p) > MAX_CHARS or max_depth(p) > MAX_DEPTH:
        return Verdict(False, f"too_large: the answer exceeds {MAX_CHARS} characters or "
                       f"nests deeper than {MAX_DEPTH}", None)
    if ref is None:
        same = _squash(p).lower() == _squash(r).lower()
        return Verdict(same, f"{'equivalent' if same else 'not equivalent'}: reference is not "
                       f"math ({why}); compared as text", p)
    try:
        pred = _structure(p, ref.kind == "scalar")
        if spec is not None:
            bad = _form_problem(pred, ref, spec, _given(given) if given else None)
            if bad:
                return Verdict(False, f"not_final_form: {bad}", str(pred))
        ok = _equal(pred, ref)
    except TooLarge as e:
        return Verdict(False, f"too_large: {e}", None)
    except (ExprError, RecursionError, ZeroDivisionError, OverflowError, ValueError) as e:
        return Verdict(False, f"unparseable: {e}", None)
    if ok:
        return Verdict(True, "equivalent", str(pred))
    return Verdict(False, f"not equivalent: got {pred}, expected {ref}", str(pred))


# ---------------------------------------------------------------------------- form
# A negation of the answer's value ("the answer is not 3", "\\ne 3", "it isn't \\boxed{3}",
# "anything except 3"), a bound ("at least 3") or a hedge in the answer ("3, or maybe 4"): the
# verdict names it; nothing is stripped. A negation after the value ("It is 3, not 4") or in an
# earlier sentence ("\\boxed{2} ... no, \\boxed{3}") is about another value. Every pattern
# here runs on text whose spaces are collapsed (single " "), at most MAX_CHARS long.
_NEG = (r"(?:\\(?:neq?|neg|lnot|not)(?![A-Za-z])|≠|¬|!=|=/=|\bnot\b|n't\b|\bcannot\b|\bnever\b|\bno\b|\bnone\b|"
        r"\bother than\b|\bexcept(?:ing)?\b|\bexcluding\b|\bneither\b|\bnor\b|\bunequal\b|"
        r"\bdifferent (?:from|than|to)\b|\banything but\b|\bbesides\b)")
_NEG_RE = re.compile(rf"(?i){_NEG}(?! ?,)")  # "No, it is 3" is no negation of 3
_NEG_END = re.compile(rf"(?i){_NEG} ?(?:(?:be|equals?|equal to|is) ?)?[:=]? ?$")
_BOUND = re.compile(r"(?i)\b(?:at (?:least|most)|(?:no )?(?:more|less|fewer|greater|larger|smaller|bigger|"
                    r"higher|lower) than|up to|not (?:more|less) than|upwards of|in excess of|"
                    r"exceed(?:s|ing)?|over|above|below|under|beyond)\b")
# Anywhere in the lead's last sentence: "It is not the case that the answer is 3".
_NEG_CLAIM = re.compile(r"(?i)\b(?:not|n't) (?:the case|true|correct|right)\b|\b(?:false|untrue|wrong) that\b")
_HEDGE = re.compile(r"(?i)\b(?:maybe|perhaps|possibly|probably|alternatively|might|could)\b")
# LaTeX that only wraps words: \text{not } 3 and \operatorname{not}(3) say "not 3".
_WRAPPERS = re.compile(r"\\(?:text|textrm|textbf|textit|textsf|texttt|textnormal|mathrm|mathbf|mathit|"
                       r"mathsf|mathtt|mathnormal|operatorname|mbox|hbox)(?![A-Za-z])\*?|[{}~]")
_VALUE_START = re.compile(r"[\d(\[]|\\(?:frac|dfrac|sqrt|pi)(?![A-Za-z])|(?<![A-Za-z])[A-Za-z](?![A-Za-z'])")


def _words(s: str) -> str:
    """``s`` as the words it says: LaTeX text wrappers and braces removed, spaces collapsed."""
    return " ".join(_WRAPPERS.sub(" ", s).split())


def _hedged(answer: str, lead: str = "", whole: bool = False) -> str | None:
    """Why ``answer`` does not state one value plainly (None when it does). Without ``whole``
    (the extracted text, before the written forms are read) only its start and the end of its
    ``lead`` are read; with ``whole`` (the clause that states the value) every word before the
    value: ``anything except 3``, ``at least 3``."""
    said = _words(answer)
    head = said
    if whole:
        v = _VALUE_START.search(said)
        head = said[: v.start()] if v is not None else said
    b = _BOUND.search(head) if whole else _BOUND.match(said)
    if b is not None:  # first: "no more than 3" is a bound
        return f"bound: the answer says {b.group(0)!r}; state the value itself, not a bound on it"
    m = _NEG_RE.search(head) if whole else _NEG_RE.match(said)
    if m is None:
        m = _NEG_END.search(_words(lead)) or _NEG_CLAIM.search(_words(lead))
    if m is not None:
        return f"negated: the answer says {m.group(0).strip()!r} before its value; state the value itself"
    m = _HEDGE.search(said)
    if m is not None:
        return f"hedged: the answer says {m.group(0)!r}; state one value"
    return None


_ECHOED = "echoed: the answer restates the question"
_MATH_WORD = re.compile(r"[A-Za-z]{2,}")


def _fold(s: str) -> str:
    """Spaces collapsed and ASCII letters lowered (indices kept: one character for one)."""
    return " ".join(s.split()).translate(_LOWER)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _without_question(text: str, question: str) -> str:
    """``text`` with every copy of ``question`` cut out (spaces and letter case aside); the
    copies become line breaks, so what the message says around them stays apart."""
    q = _fold(question)
    if len(q) < 8 or q not in _fold(text):
        return text
    flat = " ".join(text.split())
    folded = flat.translate(_LOWER)
    out, i = [], 0
    while (k := folded.find(q, i)) >= 0:
        out += [flat[i:k], "\n"]
        i = k + len(q)
    return "".join(out) + flat[i:]


def _quotes(answer: str, question: str) -> bool:
    """Is the extracted answer a piece of the question (``from x = 0 to x = 4``, ``x + 5 = 8``)
    rather than a value? A piece with an ``=`` or two words that are not math."""
    a = _fold(answer)
    if len(a) < 3 or a not in _fold(question):
        return False
    words = [w for w in _MATH_WORD.findall(a) if w not in _KNOWN_WORDS and w not in forms.MATH_WORDS]
    return "=" in a or len(words) >= 2


def _plain_form(p: str, spec: Form) -> str | None:
    try:
        return check_value(parse(p), spec.element) if spec.element != "any" else None
    except ExprError as e:
        return str(e)


@functools.lru_cache(maxsize=1024)
def _given(text: str) -> Node | None:
    """The question's expression as a node (None when it does not parse as one value)."""
    try:
        a = _structure(_rewrite(extract(text)), True)
    except (ExprError, RecursionError, ZeroDivisionError, OverflowError, ValueError):
        return None
    return a.node if a.kind == "scalar" else None


_NUMERIC = ("integer", "decimal", "fraction", "number", "complex")


def _form_problem(pred: _Ans, ref: _Ans, spec: Form, given: Node | None) -> str | None:
    """Why ``pred`` is not in form ``spec`` (every value inside is checked), else None."""
    if spec.element == "any":
        return None
    leaves = _scalars(pred)
    refs = _scalars(ref)
    for a in leaves:
        assert a.node is not None
        if a.equation is not None:
            return f"{a.equation} = {to_str(a.node)} is an equation, not a value"
        node = a.node
        if a.unitless is not None and spec.element in _NUMERIC and free_symbols(node):
            node = a.unitless
        rnode = refs[0].node if len(refs) == 1 and len(leaves) == 1 else None
        bad = check_value(node, spec.element, reference=rnode, given=given)
        if bad:
            return bad
    return None


def _scalars(a: _Ans) -> list[_Ans]:
    return [a] if a.kind == "scalar" else [x for i in a.items for x in _scalars(i)]


def infer_form(reference: str) -> str:
    """The form a reference is written in (what a dataset row without ``form`` asks for):
    ``number`` for number literals, ``set[...]``/``tuple[...]``/``interval`` by shape, ``any``
    for text. See :mod:`.answer_form`."""
    _raw, _r, ref, _why = _reference(reference)
    if ref is None:
        return "any"
    leaves = _scalars(ref)
    kinds = {infer_element(x.node) for x in leaves if x.node is not None and not _is_oo(x.node)}
    element = kinds.pop() if len(kinds) == 1 else "number" if not kinds else "expression"
    if ref.kind == "scalar":
        return element
    if ref.kind == "union" or ref.kind == "seq" and ref.brackets in ("[)", "(]") \
            or any(x.node is not None and _is_oo(x.node) for x in leaves):
        return "interval"
    if element == "antiderivative":
        element = "expression"
    return f"{'tuple' if ref.kind == 'seq' else 'set'}[{element}]"


def reference_form_problem(reference: str, form: str | Form, given: str | None = None) -> str | None:
    """Why a reference answer is not in its own ``form`` (None when it is): a dataset whose
    reference breaks its form could never be answered."""
    spec = parse_form(form) if isinstance(form, str) else form
    _raw, _r, ref, why = _reference(reference)
    if ref is None:
        return None if spec.element == "any" else f"the reference is not math ({why})"
    try:
        return _form_problem(ref, ref, spec, _given(given) if given else None)
    except (ExprError, RecursionError, ZeroDivisionError, OverflowError, ValueError) as e:
        return str(e)
