"""Is a predicted answer mathematically equivalent to the reference? ``verify(pred, ref)``.

The rules (also in the README, "The answer verifier"):

* **Extraction.** The last ``\\boxed{}`` wins; else the last ``$...$`` / ``\\(...\\)`` segment;
  else the text after "answer is". ``x = 3`` means 3; a trailing unit or word is dropped
  ("3 apples", "12 cm", ``3 \\text{ apples}``); ``50\\%`` means 50; ``1,000`` means 1000 when
  a single number is expected.
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
  agree to 30 significant digits at four of six fixed points in [0.6, 2.3] (the random-point
  test sympy's ``Expr.equals`` falls back to). A reference containing ``+ C`` accepts any
  antiderivative: the difference must be constant.
* **Bounds.** Inputs over 100,000 characters, answers over 2,000, nesting deeper than 60,
  powers beyond 100,000 bits and values beyond 10**10000 are rejected with a reason, in
  bounded time, in any thread (no signals, no ``eval``); :mod:`.symbolic` adds the bounds
  on what sympy is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentgym.environments.math.expr import (
    MAX_CHARS,
    MAX_DEPTH,
    ExprError,
    Node,
    NotRational,
    TooLarge,
    eval_exact,
    parse,
    to_str,
)
from agentgym.environments.math.latex import (
    extract,
    max_depth,
    split_top,
    strip_lead,
    strip_text,
    to_plain,
)
from agentgym.environments.math.symbolic import equal as symbolic_equal

__all__ = ["MAX_INPUT", "Verdict", "verify"]

MAX_INPUT = 100_000  # characters of a whole final message
MAX_ITEMS = 50  # elements of a set / tuple / list

_LIST_SEPS = (",", ";", " or ", " and ", "\\text{ or }", "\\text{ and }", "\\quad", "\\qquad")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = re.compile(r"[-+]?\d*\.(\d+)")
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


def _structure(s: str, expect_scalar: bool) -> _Ans:
    s = strip_lead(s.strip().replace("∪", "\\cup"))
    if not s:
        raise ExprError("empty answer")
    if _THOUSANDS.fullmatch(s) and expect_scalar:
        s = s.replace(",", "")
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
        return _structure(eqs[-1], expect_scalar)
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
    plain = strip_text(to_plain(s))
    if "+-" in plain or "-+" in plain:  # a \pm b: both values, also inside a fraction
        sign = "+-" if "+-" in plain else "-+"
        return _Ans("list", items=[_scalar(plain.replace(sign, "+", 1)),
                                   _scalar(plain.replace(sign, "-", 1))])
    return _scalar(plain)


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
        return (lhs if _VAR.fullmatch(lhs) else None), _structure(eqs[-1], True)
    return None, _structure(part, True)


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


def _scalars_equal(p: _Ans, r: _Ans) -> bool:
    pn, rn = p.node, r.node
    assert pn is not None and rn is not None
    if pn == rn:
        return True
    oo_p, oo_r = _is_oo(pn), _is_oo(rn)
    if oo_p or oo_r:
        return oo_p == oo_r
    dec = _DECIMAL.fullmatch(r.text.strip())
    # Only an exact (non-decimal) prediction is rounded to a decimal reference's precision.
    places = len(dec.group(1)) if dec and not _DECIMAL.search(p.text) else None
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
        # "3, 4" and "x = 3, y = 4" stand for the tuple (3, 4), never for an interval [3, 4]
        same_shape = p.kind == "seq" and p.brackets == r.brackets or p.bare and r.brackets == "()"
        return (same_shape and len(p.items) == len(r.items)
                and all(_equal(a, b) for a, b in zip(p.items, r.items)))
    if r.kind in ("set", "list"):
        if p.kind == "scalar":
            return all(_equal(p, b) for b in r.items)
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


def verify(predicted: str, reference: str) -> Verdict:
    """Decide whether ``predicted`` (a final message) states the answer ``reference``.

    Never raises on content; unparseable or hostile input gives ``correct=False`` and a reason.
    """
    if not isinstance(predicted, str) or not isinstance(reference, str):
        return Verdict(False, "bad_input: expected two strings", None)
    if predicted.strip() == reference.strip():  # the common case: microseconds
        return Verdict(True, "equivalent: identical text", reference.strip())
    if len(predicted) > MAX_INPUT:
        return Verdict(False, f"too_long: the answer has {len(predicted)} characters; "
                       f"at most {MAX_INPUT}", None)
    p, r = extract(predicted), extract(reference)
    if not p:
        return Verdict(False, "unparseable: no answer found in the final message", None)
    if _squash(p) == _squash(r):
        return Verdict(True, "equivalent: same answer text", p)
    if len(p) > MAX_CHARS or max_depth(p) > MAX_DEPTH:
        return Verdict(False, f"too_large: the answer exceeds {MAX_CHARS} characters or "
                       f"nests deeper than {MAX_DEPTH}", None)
    try:
        ref = _structure(r, True)
    except (ExprError, RecursionError) as e:
        same = _squash(p).lower() == _squash(r).lower()
        return Verdict(same, f"{'equivalent' if same else 'not equivalent'}: reference is not "
                       f"math ({e}); compared as text", p)
    try:
        pred = _structure(p, ref.kind == "scalar")
        ok = _equal(pred, ref)
    except TooLarge as e:
        return Verdict(False, f"too_large: {e}", None)
    except (ExprError, RecursionError, ZeroDivisionError, OverflowError, ValueError) as e:
        return Verdict(False, f"unparseable: {e}", None)
    if ok:
        return Verdict(True, "equivalent", str(pred))
    return Verdict(False, f"not equivalent: got {pred}, expected {ref}", str(pred))
