"""How people and models write answers, read back into the verifier's grammar.

Each rule is a decision about what a written form *means*; docs/rewards.md ("Forms")
lists them with their reasons. Everything here is a linear pass over an answer already
cut to :data:`.expr.MAX_CHARS` characters, applied only when the text can contain the form:
no regex has two unbounded quantifiers that can share a run of characters, and none restarts
an unbounded scan at every position (a run of spaces is entered only at its start).

* :func:`corrected`: a self-correction states the value after it ("3, no wait, 4" is 4).
* :func:`prose`: an answer inside a sentence is the value the sentence concludes with.
* :func:`number_words`: English number words are numbers ("twenty-one", "two thirds").
* :func:`matrices`: LaTeX matrix environments become nested brackets.
* :func:`grouped`: digit grouping in the usual styles (``1,000``, ``1 000``, ``1.000.000``,
  ``1'000``, ``1_000``) when one number is expected.
* :func:`mark`: a percent or degree mark, kept aside: ``50%`` is 50 or 1/2, ``30°`` is 30 or pi/6.
* :func:`mixed_number`: ``2 1/2`` and ``2\\frac{1}{2}`` are five halves.
* :func:`without_unit`: the number before a unit (``5 m``, ``3 km/h``), for numeric references.
* :func:`long_decimal_digits`: how many significant digits a decimal rendering carries.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["corrected", "grouped", "long_decimal_digits", "mark", "matrices", "mixed_number",
           "number_words", "prose", "without_unit"]

# ---------------------------------------------------------------------------- self-corrections
# A correction after a break in the sentence: "3, no wait, 4", "3. Actually, 4", "3; sorry, 4",
# "3 - or rather 4", "3 but actually 4", "3, err, 4". Entered only at a punctuation mark (or
# " but"), so no run of spaces is rescanned.
_CORRECTION = re.compile(r"(?i)(?:[,;.!?\u2014\u2013]| -| but)\s*(?:no[\s,]*wait|wait|actually|i mean|correction|"
                         r"sorry|oops|scratch that|make (?:that|it)|(?:or )?rather|err?m?|uh|um|hmm+|"
                         r"no(?=\s*[,:]))\b[\s,:;.!\u2014-]*")
_MATHY = re.compile(r"[\d=^\\(]")


def corrected(s: str) -> str:
    """The text after the last self-correction that goes on to state something (a digit, an
    ``=``, a power, LaTeX or a bracket): ``64, no wait, 65`` -> ``65``. A correction is never read
    backwards (the value before it is withdrawn); one that states nothing ("3. Actually, that is
    right.") leaves the text as it was."""
    if _ALPHA.search(s) is None:
        return s
    mathy = _MATHY.search(s[::-1])  # the last mathy character, found once
    if mathy is None:
        return s
    stated_before = len(s) - mathy.start()  # a correction must end before this index
    last = None
    for m in _CORRECTION.finditer(s):
        if m.end() < stated_before:
            last = m
    return s[last.end():] if last is not None else s

# ---------------------------------------------------------------------------- prose
# A concluding cue: what follows it is the stated value ("so 12 apples in total").
_CUE = re.compile(r"(?i)(?:\b(?:is|are|was|were|equals?|equal to|gives?|get|gets|got|makes?|yields?|"
                  r"so|thus|therefore|hence|becomes?)\b|=|:)")
# Where the value's clause ends: a comma or semicolon before a word, a sentence end, "because".
_CLAUSE_END = re.compile(r"(?i)(?:[,;]\s*(?=[A-Za-z]{2,}\b)|\.\s+(?=[A-Z])|\.\s*$|!|\?|"
                         r"(?<!\s)\s+(?:because|since|as|which|when|where|while|but|not)\b)")
_ONE_LETTER_IS = re.compile(r"\b([A-Za-z])\s+(?:is equal to|equals|is)\s+")
_WORD = re.compile(r"[A-Za-z]{3,}")
_ALPHA = re.compile(r"[A-Za-z]")
_CMDS = re.compile(r"\\[A-Za-z]+")
# Words that are math, not prose (functions and constants are added by the verifier).
MATH_WORDS = {"and", "or", "sqrt", "frac", "dfrac", "tfrac", "pi", "infty", "infinity", "inf", "text",
              "mathrm", "cdot", "times", "pmatrix", "bmatrix", "matrix", "begin", "end", "binom",
              "choose", "percent", "degrees", "degree", "deg", "circ"}


def prose(s: str, known: set[str]) -> str:
    """The value a sentence states: after its last concluding cue, up to the clause's end.

    Applied only to text with words that are neither math (``known``) nor units of a number
    ("3 apples" keeps working without it). A single-letter variable followed by "is" or
    "equals" is an assignment (``x is 3 and y is 4`` is the pair), never a cue.
    """
    s = s.replace("\u2019", "'").replace("'s ", " is ")
    if _ALPHA.search(s) is None:
        return s
    s = _ONE_LETTER_IS.sub(r"\1 = ", s)
    bare = _CMDS.sub(" ", s)
    words = [w.lower() for w in _WORD.findall(bare)]
    if not any(w not in known and w not in MATH_WORDS and w not in _NUMBER_WORDS for w in words):
        return s
    depth = _depths(s)
    cues = [m for m in _CUE.finditer(s) if not depth[m.start()]]
    if cues:
        last = cues[-1]
        if last.group() == "=" and _ONE_LETTER_BEFORE.search(s, 0, last.start()):
            # "... so x = 5": keep the assignment (the verifier reads x = 5 as 5)
            start = _ONE_LETTER_BEFORE.search(s, 0, last.start()).start(1)  # type: ignore[union-attr]
        else:
            start = last.end()
        s = s[start:]
    depth = _depths(s)
    end = _CLAUSE_END.search(s)
    while end is not None and depth[end.start()]:
        end = _CLAUSE_END.search(s, end.end())
    if end is not None and s[: end.start()].strip():
        s = s[: end.start()]
    return s.strip(" ,;:.")


_ONE_LETTER_BEFORE = re.compile(r"(?:^|[\s(,])([A-Za-z])\s*$")


def _depths(s: str) -> list[int]:
    """Bracket depth before each character (and at the end): one pass, no rescans."""
    out, d = [], 0
    for ch in s:
        out.append(d)
        if ch in "([{":
            d += 1
        elif ch in ")]}":
            d -= 1
    out.append(d)
    return out


# ---------------------------------------------------------------------------- number words
_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_FRACTIONS = {"half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4,
              "fourth": 4, "fourths": 4, "fifth": 5, "fifths": 5, "sixth": 6, "sixths": 6,
              "seventh": 7, "sevenths": 7, "eighth": 8, "eighths": 8, "ninth": 9, "ninths": 9,
              "tenth": 10, "tenths": 10}
_NUMBER_WORDS = {*_UNITS, *_TENS, *_SCALES, *_FRACTIONS, "dozen", "negative", "minus", "a", "an"}
_WORDS_RE = "|".join(sorted(_NUMBER_WORDS - {"a", "an", "negative", "minus"}, key=len, reverse=True))
_NUM_RUN = re.compile(rf"(?i)\b(?:(?:negative|minus)\s+)?(?:(?:a|an|{_WORDS_RE})\b"
                      rf"(?:(?:\s+|-|\s+and\s+)(?:a\s+|an\s+)?(?:{_WORDS_RE})\b)*)")


_MINUS = re.compile(r"(?i)\b(?:negative|minus)\s+(?=\d)")  # "minus 3" -> -3


def _run_value(words: list[str]) -> Fraction | None:
    """The value of a run of number words, or None when they do not form a number."""
    sign = 1
    if words and words[0] in ("negative", "minus"):
        sign, words = -1, words[1:]
    total = Fraction(0)
    current: int | None = None  # the count being built ("twenty one", "three hundred")
    seen = False
    for w in words:
        if w in ("a", "an"):  # "a dozen", "two and a half": a new count of one
            total += current or 0
            current = 1
        elif w in _UNITS or w in _TENS:
            current = (current or 0) + _UNITS.get(w, _TENS.get(w, 0))
        elif w == "dozen" or w == "hundred":
            current = (1 if current is None else current) * (12 if w == "dozen" else 100)
        elif w in _SCALES:
            total += (1 if current is None else current) * _SCALES[w]
            current = None
        elif w in _FRACTIONS:  # "two thirds", "a half"; "third" alone is an ordinal
            if current is None:
                return None
            total += Fraction(current, _FRACTIONS[w])
            current = None
        else:
            return None
        seen = True
    if not seen:
        return None
    return sign * (total + (current or 0))


def number_words(s: str) -> str:
    """Runs of English number words replaced by the number ("twenty-one" -> 21, "two thirds" -> 2/3)."""
    if _ALPHA.search(s) is None:
        return s

    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        words = [w for w in re.split(r"[\s-]+", text.lower()) if w and w != "and"]
        if words in (["a"], ["an"]) or not words:
            return text
        v = _run_value(words)
        if v is None:
            return text
        out = str(v.numerator) if v.denominator == 1 else f"({v.numerator}/{v.denominator})"
        return out if v >= 0 or out.startswith("-") else out

    return _MINUS.sub("-", _NUM_RUN.sub(sub, s))


# ---------------------------------------------------------------------------- matrices
_ENV_NAMES = r"[pbBvV]?matrix|smallmatrix|array"
_ENV_TAG = re.compile(rf"\\(begin|end)\{{({_ENV_NAMES})\}}")
_ENV_ARGS = re.compile(r"\{[^{}]*\}")  # \begin{array}{cc}: the column spec


def matrices(s: str) -> str:
    """``\\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix}`` -> ``[[a, b], [c, d]]``.

    pmatrix, bmatrix, Bmatrix, matrix, smallmatrix and array are the same matrix; a single row
    or column is the tuple of its entries (a vector, equal to ``(a, b)``). vmatrix (a
    determinant) is left as it is (not an answer the verifier reads).
    """
    if "\\begin" not in s:
        return s
    # One pass over the tags: each \end closes the nearest open \begin of its name (the
    # innermost first, as a regex's lazy .*? did, without rescanning the text per \begin).
    out: list[str] = []
    done = 0  # s[:done] is in out
    opened: dict[str, list[tuple[int, int]]] = {}  # name -> (start of \begin, start of the body)
    for m in _ENV_TAG.finditer(s):
        name = m.group(2)
        if m.group(1) == "begin":
            spec = _ENV_ARGS.match(s, m.end())
            opened.setdefault(name, []).append((m.start(), spec.end() if spec else m.end()))
            continue
        if not opened.get(name):
            continue
        start, body = opened[name].pop()
        if start < done:  # it encloses an environment already read: left as written
            continue
        out += [s[done:start], _matrix(name, s[body:m.start()], s[start:m.end()])]
        done = m.end()
    return "".join(out) + s[done:]


def _matrix(name: str, body: str, whole: str) -> str:
    if name.lower() == "vmatrix":
        return whole
    rows = [[c.strip() for c in r.split("&")] for r in body.split("\\\\") if r.strip()]
    if not rows:
        return whole
    if len(rows) == 1 or all(len(r) == 1 for r in rows):
        flat = [c for r in rows for c in r]
        return flat[0] if len(flat) == 1 else "(" + ", ".join(flat) + ")"
    return "[" + ", ".join("[" + ", ".join(r) + "]" for r in rows) + "]"


# ---------------------------------------------------------------------------- digit groups
# One separator style per number; the head has 1-3 digits and no leading 0 (``0,064`` is a
# decimal comma or two numbers, never 64), every further group exactly 3.
_GROUPED = [
    (re.compile(r"([-+]?[1-9]\d{0,2}(?:,\d{3})+)(\.\d+)?"), ","),
    (re.compile(r"([-+]?[1-9]\d{0,2}(?:[ \u00a0\u2009\u202f]\d{3})+)(\.\d+)?"), " "),
    (re.compile(r"([-+]?[1-9]\d{0,2}(?:['\u2019]\d{3})+)(\.\d+)?"), "'"),
    (re.compile(r"([-+]?[1-9]\d{0,2}(?:_\d{3})+)(\.\d+)?"), "_"),
    (re.compile(r"([-+]?[1-9]\d{0,2}(?:\.\d{3}){2,})(,\d+)?"), "."),  # 1.000.000 (two or more dots)
]
_REST = re.compile(r"\s*(?:[A-Za-z%°\\].*)?")


def grouped(s: str) -> str | None:
    """A number written with digit groups, as plain digits (None when ``s`` is not one).

    ``1,000``, ``1 000`` (also with thin or no-break spaces), ``1'000``, ``1_000`` with an
    optional decimal point, and ``1.000.000`` (two or more dots: one dot is a decimal point)
    with an optional decimal comma. Words after the number (a unit) are kept.
    """
    if not s[:2].lstrip("+-")[:1].isdigit():
        return None
    for pat, sep in _GROUPED:
        if sep not in s and not (sep == " " and any(ch in s for ch in "\u00a0\u2009\u202f")) \
                and not (sep == "'" and "\u2019" in s):
            continue
        m = pat.match(s)
        if m is not None and _REST.fullmatch(s, m.end()):
            whole = m.group(1).replace(sep, "").replace("\u2019", "")
            for ch in " \u00a0\u2009\u202f":
                whole = whole.replace(ch, "")
            dec = (m.group(2) or "").replace(",", ".")
            return whole + dec + s[m.end():]
    return None


# ---------------------------------------------------------------------------- marks
# Applied to rstripped text, anchored at its end by "$": no leading or trailing \s* to rescan.
_PERCENT = re.compile(r"(?:\\%|%|\bper\s*cent\b|\bpercent\b)$", re.I)
_DEGREE = re.compile(r"(?:\^\s*(?:\{\s*)?\\circ(?:\s*\})?|\\circ|°|\\degree|\bdegrees?\b|\bdeg\b)$", re.I)


def mark(s: str) -> tuple[str, str | None]:
    """Split a trailing percent or degree mark off: ``("50", "%")``, ``("30", "°")``, ``(s, None)``."""
    t = s.rstrip()
    if "%" in t or "cent" in t.lower():
        m = _PERCENT.search(t)
        if m is not None:
            return t[: m.start()].rstrip(), "%"
    if "circ" in t or "°" in t or "deg" in t.lower():
        m = _DEGREE.search(t)
        if m is not None:
            return t[: m.start()].rstrip(), "°"
    return s, None


# ---------------------------------------------------------------------------- mixed numbers
_VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5),
           "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8)}
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
_MIXED = re.compile(r"\s*([-+]?)\s*(\d+)\s*(?:\s(\d+)\s*/\s*(\d+)|\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}"
                    r"|([½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞]))(\s*(?:[A-Za-z\\].*)?)")


def mixed_number(s: str) -> str | None:
    """``2 1/2``, ``2\\frac{1}{2}``, ``2½`` -> ``(5/2)``: a whole number beside a proper fraction
    of integers is their sum (school arithmetic), never their product. None when not one."""
    t = s.strip()
    if t in _VULGAR:
        a, b = _VULGAR[t]
        return f"({a}/{b})"
    if "/" not in s and "frac" not in s and _VULGAR_RE.search(s) is None:
        return None
    m = _MIXED.fullmatch(s)
    if m is None:
        return None
    sign, whole = m.group(1), int(m.group(2))
    if m.group(7):
        a, b = _VULGAR[m.group(7)]
    else:
        a, b = int(m.group(3) or m.group(5)), int(m.group(4) or m.group(6))
    if not 0 < a < b:
        return None  # 2 3/2 is not a mixed number; leave it to the grammar
    v = whole * b + a
    return f"({'-' if sign == '-' else ''}{v}/{b})" + m.group(8)


# ---------------------------------------------------------------------------- units
_UNIT = (r"(?:[kcmµun]?m|[kmµ]?g|m?s|sec|secs|[mµ]?[lL]|h|hr|hrs|min|mins|ft|in|yd|mi|lb|lbs|oz|"
         r"mph|kph|kmh|Hz|[kM]Hz|[kM]?W|[kM]?J|N|Pa|kPa|V|A|mA|K|°[CF]|cal|kcal)")
_POW = r"(?:\s*\^\s*\(?\{?\d\}?\)?)?"
_NUMBER_UNIT = re.compile(r"(.*?[\d)}])\s*(" + _UNIT + _POW + r"(?:\s*/\s*" + _UNIT + _POW + r")*)\s*")


def without_unit(s: str) -> str | None:
    """The number in ``5 m``, ``5m``, ``3 km/h``, ``9 m/s^2`` (None when no unit follows it).

    The verifier uses it only when the other side is a plain number: a unit is not graded
    there (the question fixed it), while ``2m`` against ``m*2`` stays a product.
    """
    tail = s.rstrip(" ^{}()0123456789")
    if not tail or not (tail[-1].isalpha() or tail[-1] == "°"):  # no unit can end here
        return None
    m = _NUMBER_UNIT.fullmatch(s)
    return m.group(1) if m is not None else None


# ---------------------------------------------------------------------------- long decimals
_DEC = re.compile(r"\s*[-+]?(\d*)\.(\d+)\s*")


def long_decimal_digits(s: str) -> int:
    """Significant digits of a plain decimal (0 when ``s`` is not one)."""
    m = _DEC.fullmatch(s)
    if m is None:
        return 0
    return len((m.group(1) + m.group(2)).lstrip("0"))
