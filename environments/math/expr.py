"""A small, safe expression language: tokenizer, parser and two evaluators.

Both the answer verifier and the calculator tool read untrusted text, so nothing here calls
``eval`` (sympy's ``parse_expr`` does) and every cost is bounded *structurally*, which works in
any thread (signal-based timeouts only work in the main thread):

* input length (``MAX_CHARS``), literal length (``MAX_DIGITS``), nesting depth (``MAX_DEPTH``)
  and node count (``MAX_NODES``) are checked while parsing;
* exact evaluation refuses a power whose result would exceed ``MAX_BITS`` bits
  (``2**2**2**99`` and ``10**10**10`` stop at the guard, not in the bignum library);
* numeric evaluation uses a private 50-digit mpmath context per thread and refuses
  magnitudes beyond ``10**MAX_EXP10``.

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
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

__all__ = [
    "FUNCTIONS",
    "ExprError",
    "Node",
    "TooLarge",
    "apply_binop",
    "eval_exact",
    "eval_fp",
    "eval_mp",
    "eval_mp_real",
    "eval_mp_span",
    "free_symbols",
    "mp_context",
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
