"""A small, safe expression language: tokenizer, parser and node utilities.

Both the answer verifier and the calculator tool read untrusted text, so nothing here calls
``eval`` (sympy's ``parse_expr`` does) and every cost is bounded *structurally*, which works in
any thread (signal-based timeouts only work in the main thread): input length
(``MAX_CHARS``), literal length (``MAX_DIGITS``), nesting depth (``MAX_DEPTH``) and node count
(``MAX_NODES``) are checked while parsing. The evaluators (exact ``Fraction`` arithmetic and
guarded mpmath values, bounded by ``MAX_BITS`` and ``MAX_EXP10``) are in :mod:`.values`.

Grammar (plain text; LaTeX is rewritten into it by :mod:`.latex`)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | <implicit>) unary)*
    unary  := ("-" | "+") unary | power
    power  := atom ("!" | "!!")* [("^" | "**") unary]   # right-associative; n! and n!!
    atom   := number | name | name "(" args ")" | func atom | "(" expr ")" | "|" expr "|"

``log_b x`` / ``log_b(x)`` (also ``log2(x)``, ``log10(x)``) is ``log(x, b)``; ``C(n, k)`` with two
arguments is ``binom(n, k)``; ``inf``/``Infinity``/``oo`` are infinity in any case.
A node is a tuple: ``("num", Fraction)``, ``("sym", name)``, ``("const", "pi"|"e"|"i"|"oo")``,
``("neg", a)``, ``("add"|"sub"|"mul"|"div"|"pow", a, b)``, ``("fn", name, a[, b])``.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

__all__ = [
    "CONSTANTS",
    "FUNCTIONS",
    "MAX_BITS",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_EXP10",
    "ExprError",
    "Node",
    "TooLarge",
    "free_symbols",
    "parse",
    "to_str",
]

MAX_CHARS = 2_000  # longer answers are not answers
MAX_DIGITS = 200  # per numeric literal
MAX_DEPTH = 60  # parentheses / operator nesting
MAX_NODES = 400
MAX_BITS = 100_000  # largest exact integer a power may produce (~30,000 digits)
MAX_EXP10 = 10_000  # numeric values beyond 10**MAX_EXP10 are "too large"

Node = tuple[Any, ...]

FUNCTIONS = {
    "sqrt", "root", "exp", "ln", "log", "sin", "cos", "tan", "sec", "csc", "cot",
    "asin", "acos", "atan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "abs",
    "binom", "factorial", "factorial2",
}
_ARITY: dict[str, tuple[int, ...]] = {"root": (2,), "log": (1, 2), "binom": (2,)}
CONSTANTS = {"pi": "pi", "e": "e", "i": "i", "oo": "oo", "inf": "oo", "infty": "oo",
             "infinity": "oo"}


class ExprError(ValueError):
    """The text is not an expression of the grammar (the message says where and why)."""


class TooLarge(ExprError):
    """The expression is well-formed but too big to evaluate within the guards."""


_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,4}(?![A-Za-z]))?)"
    r"|(?P<name>[A-Za-z]+(?:_[A-Za-z0-9]+)?)"
    r"|(?P<op>\*\*|[-+*/^(),|!])"
    r")"
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    if len(text) > MAX_CHARS:
        raise TooLarge(f"expression has {len(text)} characters; at most {MAX_CHARS}")
    out: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None or m.end() == pos:
            rest = text[pos:].strip()
            if not rest:
                break
            raise ExprError(f"unexpected character {rest[0]!r} at position {pos}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
    return out


def _split_name(word: str) -> list[str]:
    """A multi-letter word that is no known name is a product of one-letter symbols (``xy``)."""
    if word in FUNCTIONS or word in CONSTANTS or "_" in word or len(word) == 1:
        return [word]
    if word.lower() in CONSTANTS:  # Infinity, INF
        return [word.lower()]
    if word == "logb":  # logb(base) x: latex.to_plain's form of \log_{1/2} x
        return [word]
    if len(word) <= 3 and word.endswith("e") and word[0] != "e":
        return list(word)  # "xe^x", "xye^x": variables times e (Euler's number)
    # "xy" is x*y; a word with e/i/o/u in it ("yes", "no", "cos2") is text, not a product
    if len(word) > 3 or any(ch in "eiouEIOU" for ch in word):
        raise ExprError(f"unknown word {word!r}: expected a number, a one-letter variable "
                        f"or one of {sorted(FUNCTIONS | set(CONSTANTS))}")
    return list(word)


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.toks: list[tuple[str, str]] = []
        for kind, val in tokens:
            if kind == "name":
                self.toks.extend(("name", w) for w in _split_name(val))
            else:
                self.toks.append((kind, val))
        self.i = 0
        self.depth = 0
        self.nodes = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, val: str) -> bool:
        i = self.i
        if i < len(self.toks) and self.toks[i] == ("op", val):
            self.i = i + 1
            return True
        return False

    def node(self, *parts: Any) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise TooLarge(f"expression has more than {MAX_NODES} nodes")
        return parts

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TooLarge(f"expression nests deeper than {MAX_DEPTH} levels")

    def expr(self) -> Node:
        self.enter()
        left = self.term()
        while True:
            if self.take("+"):
                left = self.node("add", left, self.term())
            elif self.take("-"):
                left = self.node("sub", left, self.term())
            else:
                self.depth -= 1
                return left

    def term(self) -> Node:
        left = self.unary()
        while True:
            if self.take("*"):
                left = self.node("mul", left, self.unary())
            elif self.take("/"):
                left = self.node("div", left, self.unary())
            elif self._implicit():
                left = self.node("mul", left, self.power())
            else:
                return left

    def _implicit(self) -> bool:
        t = self.peek()
        # "2x", "x(x+1)", "2 sin x"; never before a number ("2 3" is not six) except after a
        # factorial: 2!5! is a product
        return t is not None and (t[0] == "name" or t == ("op", "(")
                                  or t[0] == "num" and self.toks[self.i - 1] == ("op", "!"))

    def unary(self) -> Node:
        self.enter()
        if self.take("-"):
            out = self.node("neg", self.unary())
        elif self.take("+"):
            out = self.unary()
        else:
            out = self.power()
        self.depth -= 1
        return out

    def power(self) -> Node:
        base = self.atom()
        while self.take("!"):  # postfix: 5! and 5!!; (3!)! needs its parentheses
            base = self.node("fn", "factorial2" if self.take("!") else "factorial", base)
        if self.take("^") or self.take("**"):
            self.enter()
            exp = self.unary()
            self.depth -= 1
            return self.node("pow", base, exp)
        return base

    def atom(self) -> Node:
        t = self.peek()
        if t is None:
            raise ExprError("expression ended early; expected a number, name or '('")
        kind, val = t
        self.i += 1
        if kind == "num":
            mant = val.split("e")[0].split("E")[0]
            if len(mant) > MAX_DIGITS:
                raise TooLarge(f"number literal longer than {MAX_DIGITS} digits")
            return self.node("num", _number(val))
        if kind == "name":
            if val in FUNCTIONS:
                return self.call(val)
            if val.startswith("log_"):  # log_2 8, log_b(x): a logarithm with its base
                sub = val[4:]
                base = (self.node("num", Fraction(sub)) if sub.isdigit() else self.node("const", CONSTANTS[sub])
                        if sub in CONSTANTS else self.node("sym", sub))
                return self.call("log", base)
            if val == "logb" and self.take("("):
                base = self.expr()
                if not self.take(")"):
                    raise ExprError("missing ')' after a logarithm's base")
                return self.call("log", base)
            if val == "C" and self.peek() == ("op", "(") and self._two_args():
                return self.call("binom")  # C(5, 2): the binomial coefficient
            if val in CONSTANTS:
                return self.node("const", CONSTANTS[val])
            return self.node("sym", val)
        if val == "(":
            inner = self.expr()
            if not self.take(")"):
                raise ExprError("missing ')'")
            return inner
        if val == "|":
            inner = self.expr()
            if not self.take("|"):
                raise ExprError("missing closing '|'")
            return self.node("fn", "abs", inner)
        raise ExprError(f"unexpected {val!r}; expected a number, name or '('")

    def _two_args(self) -> bool:
        """Whether the parenthesised group starting here holds a top-level comma."""
        d = 0
        for kind, val in self.toks[self.i:]:
            if kind != "op":
                continue
            if val == "(":
                d += 1
            elif val == ")":
                d -= 1
                if d == 0:
                    return False
            elif val == "," and d == 1:
                return True
        return False

    def call(self, name: str, base: Node | None = None) -> Node:
        self.enter()
        t = self.peek()
        if name == "log" and base is None and t is not None and t[0] == "num" and t[1] in ("2", "10") \
                and self.i + 1 < len(self.toks) and self.toks[self.i + 1] == ("op", "("):
            self.i += 1  # log2(x), log10(x)
            base = self.node("num", Fraction(t[1]))
        if self.take("("):
            args = [self.expr()]
            while self.take(","):
                args.append(self.expr())
            if not self.take(")"):
                raise ExprError(f"missing ')' after the arguments of {name}")
        else:  # "sin x", "ln 2": the function applies to the next power
            args = [self.power()]
        self.depth -= 1
        if base is not None:
            args.append(base)
        want = _ARITY.get(name, (1,))
        if len(args) not in want:
            raise ExprError(f"{name} takes {' or '.join(map(str, want))} argument(s), got {len(args)}")
        return self.node("fn", name, *args)


def _number(val: str) -> Fraction:
    """A literal as an exact Fraction (integers and plain decimals without Fraction's regex)."""
    if val.isdigit():
        return Fraction(int(val))
    whole, dot, frac = val.partition(".")
    if dot and (whole.isdigit() or not whole) and frac.isdigit():
        return Fraction(int(whole + frac), 10 ** len(frac))
    return Fraction(val)  # exponent forms: 1e3, 2.5E-4


def parse(text: str) -> Node:
    """Parse plain-text math into a node tree; raises :class:`ExprError` (or ``TooLarge``).

    Short texts are cached (nodes are immutable tuples): answers repeat ("3", "x + 1", a
    reference's items). Only short ones, so the cache stays small whatever a policy writes."""
    return _parse_cached(text) if len(text) <= _CACHED_CHARS else _parse(text)


_CACHED_CHARS = 120  # x 8192 entries: at most ~1 MB of keys, and nodes of at most ~60 tokens


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str) -> Node:
    return _parse(text)


def _parse(text: str) -> Node:
    p = _Parser(_tokenize(text))
    if not p.toks:
        raise ExprError("empty expression")
    out = p.expr()
    if p.i != len(p.toks):
        raise ExprError(f"unexpected {p.toks[p.i][1]!r} after a complete expression")
    return out


# ---------------------------------------------------------------------------- utilities
def free_symbols(node: Node, out: set[str] | None = None) -> set[str]:
    out = set() if out is None else out
    if node[0] == "sym":
        out.add(node[1])
    elif node[0] not in ("num", "const"):
        for child in node[1:]:
            if isinstance(child, tuple):
                free_symbols(child, out)
    return out


_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2, "neg": 3, "pow": 4}
_SYM = {"add": " + ", "sub": " - ", "mul": "*", "div": "/", "pow": "^"}


def to_str(node: Node) -> str:
    """A canonical plain-text rendering (used for ``Verdict.parsed``)."""
    op = node[0]
    if op == "num":
        f = node[1]
        return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"
    if op in ("sym", "const"):
        return str(node[1])
    if op == "fn":
        return f"{node[1]}(" + ", ".join(to_str(a) for a in node[2:]) + ")"
    if op == "neg":
        inner = to_str(node[1])
        return f"-({inner})" if _PREC.get(node[1][0], 9) <= 2 else f"-{inner}"
    left, right = to_str(node[1]), to_str(node[2])
    p = _PREC[op]
    if _PREC.get(node[1][0], 9) < p or (op == "pow" and _PREC.get(node[1][0], 9) <= p):
        left = f"({left})"
    rp = _PREC.get(node[2][0], 9)
    if rp < p or (rp == p and op in ("sub", "div")) or (op == "pow" and node[2][0] == "neg"):
        right = f"({right})"
    elif node[1][0] == "num" and node[1][1].denominator != 1 and op == "pow":
        left = f"({left})"
    return left + _SYM[op] + right
