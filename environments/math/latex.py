"""From a model's answer text to plain expressions: extraction, LaTeX rewriting, text stripping.

``extract`` finds the answer inside the text (the last ``\\boxed{}``, else the last ``$...$``
segment, else the text after "answer is"); ``to_plain`` rewrites LaTeX (``\\frac``, ``\\sqrt``,
``\\pi``, ``\\cdot``, ``\\left(``...) into the grammar of :mod:`.expr`; ``strip_text`` drops a
trailing unit or word ("3 apples", "12 cm"). Every regex here is linear in its input (no
two unbounded quantifiers that can share a run of characters, no scan restarted at every
position): a whole final message of 100,000 characters is read in milliseconds.
"""

from __future__ import annotations

import functools
import re

from agentgym.environments.math.expr import CONSTANTS, FUNCTIONS, MAX_CHARS, MAX_DEPTH, ExprError, TooLarge

__all__ = ["extract", "max_depth", "split_top", "strip_lead", "strip_text", "to_plain"]

_OPEN, _CLOSE = "([{", ")]}"


def max_depth(s: str) -> int:
    """Deepest bracket nesting, counting all three kinds alike."""
    d = best = 0
    for ch in s:
        if ch in _OPEN:
            d += 1
            if d > best:
                best = d
        elif ch in _CLOSE:
            d -= 1
    return best


_BRACKET = re.compile(r"[()\[\]{}]")
TOO_LONG = -2  # _match: no closing bracket within the limit


def _match(s: str, i: int, limit: int | None = None) -> int:
    """Index of the bracket closing the one at ``s[i]`` (any kind), or -1; with ``limit``,
    :data:`TOO_LONG` when it does not close within ``limit`` characters (the scan stops there)."""
    end = len(s) if limit is None else min(len(s), i + limit)
    d = 0
    for m in _BRACKET.finditer(s, i, end):  # only the brackets are visited
        if m.group() in _OPEN:
            d += 1
        else:
            d -= 1
            if d == 0:
                return m.start()
    return -1 if end == len(s) else TOO_LONG


@functools.lru_cache(maxsize=64)
def _seps_re(seps: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(x) for x in seps))


def split_top(s: str, seps: tuple[str, ...]) -> list[str]:
    """Split at separators that sit outside every bracket (separators are tried first)."""
    if _seps_re(seps).search(s) is None:  # the common case, at C speed
        return [s]
    parts: list[str] = []
    d = start = i = 0
    n = len(s)
    while i < n:
        if d == 0:
            for sep in seps:
                if s.startswith(sep, i):
                    parts.append(s[start:i])
                    i += len(sep)
                    start = i
                    break
            else:
                sep = ""
            if sep:
                continue
        ch = s[i]
        if ch in _OPEN:
            d += 1
        elif ch in _CLOSE:
            d -= 1
        i += 1
    parts.append(s[start:])
    return parts


# ---------------------------------------------------------------------------- extraction
_ANSWER_WORDS = ("answer", "result")  # "final answer" ends where "answer" does
_ANSWER_TAIL = re.compile(r"\s*(?:(?:is\b|:|=)\s*)?", re.I)
_DELIMS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_THIN_THOUSANDS = re.compile(r"(?<=\d)\\[,!;: ](?=\d{3}(?!\d))")
_SIZING = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![A-Za-z])\.?")
_SPACES = re.compile(r"(?<!\\)\\[,!;: ]")


def extract(text: str) -> str:
    """The answer inside a final message: last ``\\boxed{}``, last math segment, or the text."""
    return extract_with_lead(text)[0]


_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")
# A negation that applies to the answer ends the lead ("... is not equal to"): its last words
# are all that is read, so only they are visited, however long the lead.
LEAD_WORDS = 12
LEAD_WINDOW = 200  # characters


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _after_answer_word(s: str) -> int:
    """Where the text after the last "answer is" / "result:" starts (-1 when there is none):
    the last whole word "answer" or "result" (any case) and its "is", ":" or "=".
    str.rfind from the end, so a 100,000-character text costs one pass at C speed."""
    low = s.lower()
    if len(low) != len(s):  # a character whose lower case is longer: keep the indices of s
        low = "".join(ch if len(ch.lower()) != 1 else ch.lower() for ch in s)
    best = -1
    for word in _ANSWER_WORDS:
        end = len(low)
        while True:
            k = low.rfind(word, 0, end)
            if k < 0:
                break
            e = k + len(word)
            if (k == 0 or not _is_word(low[k - 1])) and (e == len(low) or not _is_word(low[e])):
                best = max(best, e)
                break
            end = e - 1  # an occurrence starting before k
    if best < 0:
        return -1
    m = _ANSWER_TAIL.match(s, best)
    assert m is not None  # the tail is optional
    return m.end()


def _last_sentence(lead: str) -> str:
    """The end of the lead's last sentence: its last :data:`LEAD_WORDS` words (spaces
    collapsed), at most :data:`LEAD_WINDOW` characters. str.rfind and str.rsplit work from
    the end at C speed; the sentence is cut inside that short tail."""
    lead = lead[lead.rfind("\n") + 1 :]
    tail = " ".join(lead.rsplit(None, LEAD_WORDS)[-LEAD_WORDS:])[-LEAD_WINDOW:]
    cuts = [m.end() for m in _SENTENCE_END.finditer(tail)]
    return tail[cuts[-1]:].strip() if cuts else tail


def extract_with_lead(text: str) -> tuple[str, str]:
    """:func:`extract`, and the *lead*: the text of the answer's sentence before the answer
    (``"The answer is not"``, ``"it is not"`` before a ``\\boxed{}``), where a negation or a
    hedge that applies to the answer is written; its spaces collapsed and only its last
    :data:`LEAD_WINDOW` characters kept (a negation that ends the lead is all it is read for)."""
    s = text.strip()
    sentence = False
    lead = ""
    for cmd in ("\\boxed", "\\fbox"):
        k = s.rfind(cmd)
        if k >= 0:
            lead = s[:k]
            j = k + len(cmd)
            while j < len(s) and s[j] == " ":
                j += 1
            if j < len(s) and s[j] == "{":
                end = _match(s, j, MAX_CHARS + 2)
                if end == TOO_LONG:  # an answer over MAX_CHARS: the verifier says so
                    s = s[j + 1 :]
                    break
                if end > 0:
                    s = s[j + 1 : end]
                    break
            else:  # "\boxed 3"
                s = s[j:].split()[0] if s[j:].split() else ""
                break
    else:
        for open_, close in _DELIMS:
            end = s.rfind(close)
            if end > 0:
                start = s.rfind(open_, 0, end)
                if start >= 0 and (open_ != "$" or start < end):
                    lead = s[:start]
                    s = s[start + len(open_) : end]
                    break
        else:
            start = _after_answer_word(s)
            if start >= 0:
                lead = s[:start]
                s, sentence = s[start:], True
    lead = _last_sentence(lead)
    if len(s) > MAX_CHARS + 2:  # too long to be an answer (verify says so): no further passes
        return s, lead
    s = _SIZING.sub("", s).replace("\\$", "").replace("$", "")
    s = _THIN_THOUSANDS.sub("", s)  # 3\,000 -> 3000
    s = _SPACES.sub(" ", s)  # \, \; \  (not the "\\" that ends a matrix row)
    s = s.strip().rstrip(".").strip()
    # "!" glued to a number or a bracket is a factorial (5!); after a word, or closing a
    # sentence that named its answer ("the answer is 42!"), it is punctuation.
    if s.endswith("!"):
        head = s.rstrip("!")
        glued = head[-1:].isdigit() or head[-1:] in (")", "}") or (
            head[-1:].isalpha() and not head[-2:-1].isalpha())  # 5!, (n+1)!, n!, 7!!
        if sentence or not glued:
            s = head.strip()
    return s, lead


# ---------------------------------------------------------------------------- LaTeX
_UNICODE = str.maketrans({"−": "-", "–": "-", "×": "*", "·": "*", "÷": "/", "π": " pi ",
                          "∞": " oo ", "√": " sqrt ", "±": "+-", "∪": "\\cup", "≤": "<=", "≥": ">=", "²": "^2", "³": "^3", "°": ""})
_FRAC = {"frac", "dfrac", "tfrac", "cfrac"}
_BINOM = {"binom", "dbinom", "tbinom"}
_CIRC = re.compile(r"\^\s*(?:\{\s*)?\\circ(?:\s*\})?")  # 30^\circ, 30^{\circ}: degrees (see forms.mark)
_TEXT = {"text", "textrm", "textbf", "textit", "mathrm", "mathbf", "mathit", "mbox",
         "operatorname", "mathsf", "textnormal"}
_DROP = {"displaystyle", "textstyle", "quad", "qquad", "circ", "degree", "limits", "!", ",",
         ";", ":", " ", "%", "$"}
_MAP = {"cdot": "*", "times": "*", "div": "/", "ast": "*", "infty": "oo", "infinity": "oo",
        "pi": "pi", "{": "{", "}": "}", "le": "<=", "leq": "<=", "lt": "<", "gt": ">", "ge": ">=", "geq": ">=",
        "neq": "!=", "approx": "=", "cup": "\\cup", "pm": "+-", "mp": "-+"}
_CMD = re.compile(r"\\([A-Za-z]+|.)")


def _arg(s: str, i: int) -> tuple[str, int]:
    """One LaTeX argument starting at ``i``: a braced group, a command or one character."""
    n = len(s)
    while i < n and s[i] == " ":
        i += 1
    if i >= n:
        return "", i
    if s[i] == "{":
        end = _match(s, i)
        if end < 0:
            raise ExprError("unbalanced braces: a '{' is never closed")
        return s[i + 1 : end], end + 1
    if s[i] == "\\":
        m = _CMD.match(s, i)
        assert m is not None
        return m.group(0), m.end()
    return s[i], i + 1


def to_plain(s: str, depth: int = 0) -> str:
    """Rewrite LaTeX into the plain grammar of :mod:`.expr` (unknown commands become names)."""
    if depth > MAX_DEPTH:
        raise TooLarge(f"LaTeX nests deeper than {MAX_DEPTH} levels")
    s = s.translate(_UNICODE).replace("{,}", "")
    if "\\" not in s and "{" not in s and "_" not in s:
        return s
    if "circ" in s:
        s = _CIRC.sub("", s)
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "\\":
            m = _CMD.match(s, i)
            if m is None:
                i += 1
                continue
            cmd, i = m.group(1), m.end()
            if cmd in _FRAC:
                a, i = _arg(s, i)
                b, i = _arg(s, i)
                out.append(f"(({to_plain(a, depth + 1)})/({to_plain(b, depth + 1)}))")
            elif cmd in _BINOM:
                a, i = _arg(s, i)
                b, i = _arg(s, i)
                out.append(f" binom(({to_plain(a, depth + 1)}), ({to_plain(b, depth + 1)}))")
            elif cmd == "log" and i < n and s[i] == "_":  # \log_2 8, \log_{10}(x): a base
                a, i = _arg(s, i + 1)
                base = to_plain(a, depth + 1).strip()
                out.append(f" log_{base} " if base.isalnum() else f" logb({base}) ")
            elif cmd == "sqrt":
                idx = None
                if i < n and s[i] == "[":
                    end = _match(s, i)
                    if end < 0:
                        raise ExprError("unbalanced brackets: \\sqrt[ is never closed")
                    idx, i = s[i + 1 : end], end + 1
                a, i = _arg(s, i)
                a = to_plain(a, depth + 1)
                out.append(f" sqrt({a})" if idx is None else f" root({a}, {to_plain(idx, depth + 1)})")
            elif cmd == "operatorname":  # an operator's name: one the grammar knows, or refused
                a, i = _arg(s, i)
                name = a.strip().rstrip("*")
                if name not in _KNOWN:
                    raise ExprError(f"unknown operator \\operatorname{{{name}}}: the verifier reads the "
                                    "functions such as sin, ln, sqrt, abs; an operator it lacks is never dropped")
                out.append(" " + name + " ")
            elif cmd in _TEXT:
                a, i = _arg(s, i)
                out.append(" " + a.replace("~", " ") + " ")
            elif cmd in _DROP:
                pass
            elif cmd in _MAP:
                out.append(" " + _MAP[cmd] + " ")
            elif cmd in _KNOWN:
                out.append(" " + cmd + " ")  # \sin -> sin, \ln -> ln, \pi -> pi
            else:  # \lfloor, \Gamma, \foo: a meaning the grammar lacks is refused, never dropped
                raise ExprError(f"unknown LaTeX command \\{cmd}: the verifier reads \\frac, \\sqrt, "
                                "\\cdot, \\pi, \\infty, \\text and functions such as \\sin, \\ln")
        elif ch == "{":
            end = _match(s, i)
            if end < 0:
                raise ExprError("unbalanced braces: a '{' is never closed")
            inner = s[i + 1 : end]
            parts = split_top(inner, ("\\choose",)) if "\\choose" in inner else [inner]
            if len(parts) == 2:  # {n \choose k}
                out.append(f" binom(({to_plain(parts[0], depth + 1)}), ({to_plain(parts[1], depth + 1)}))")
            else:
                out.append("(" + to_plain(inner, depth + 1) + ")")
            i = end + 1
        elif ch == "_":  # subscripts become part of the name: x_{1} -> x_1
            a, i = _arg(s, i + 1)
            out.append("_" + re.sub(r"\W", "", a))
        elif ch == "~":
            out.append(" ")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_KNOWN = FUNCTIONS | set(CONSTANTS)
_LEAD = re.compile(r"([A-Za-z]{2,})\s+(?=[A-Za-z0-9\\(\[{-])")
_TRAIL = re.compile(r"(?:^|(?<=[\s\d)]))([A-Za-z][A-Za-z.']*(?:\^\d+)?)$")  # on rstripped text


def strip_lead(s: str) -> str:
    """Drop leading words ("it is 30", "we get (3, 4)"). A word applied to one value in brackets
    (``floor (3.5)``, ``\\mathrm{foo}(3)``) is a function the grammar may lack: it stays, to be
    read or refused, never dropped."""
    i = 0
    m = _LEAD.match(s)
    while m is not None and m.group(1).lower() not in _KNOWN and (
            m.group(1).lower() in _PROSE_WORDS or not _applied(s, m.end())):
        i = m.end()
        m = _LEAD.match(s, i)
    return s[i:]


# Words that lead an answer and are never the name of a function ("it is (3)").
_PROSE_WORDS = frozenset("""is it its are was were be we get gets got so thus hence then equals answer
result value total final the that this of to at in on as by for and or from gives yields makes""".split())


def _applied(s: str, k: int) -> bool:
    """Does a bracket at ``s[k]`` hold one value (no top-level comma): a function's argument?"""
    if k >= len(s) or s[k] != "(":
        return False
    end = _match(s, k)
    return end > 0 and len(split_top(s[k + 1 : end], (",",))) == 1


def strip_text(s: str) -> str:
    """Drop words that are not math around the answer ("3 apples", "12 cm^2", "it is 30")."""
    s = strip_lead(s.strip().rstrip("%").strip())
    for _ in range(8):
        s = s.rstrip()
        m = _TRAIL.search(s)
        if m is None:
            break
        word = m.group(1).split("^")[0].rstrip(".'")
        head = s[: m.start(1)]
        # a one-letter word right after a number is a variable (3x), two or more are a unit
        if len(word) < 2 or word in _KNOWN or not head.strip():
            break
        if head and not head[-1].isspace() and len(word) < 4:
            break  # "3cm" stays 3*c*m only when short and glued; "3apples" is text
        s = head.rstrip()
    return s.rstrip("%").strip()
