"""Reading a submission that may be hostile: every line is bounded before it is parsed.

A submission is untrusted input: a gzip bomb, a line of megabytes, JSON nested thousands deep or
an integer of thousands of digits must cost the verifier a bounded amount of time and memory and
end as a one-line problem, never as a traceback or an exhausted machine. The limits, each far
above what ``agentgym-eval`` writes (the committed core suite's largest line is ~100 KB, its
whole file ~8 MB):

* :data:`MAX_FILE_BYTES`: bytes after decompression; the gzip stream is decompressed a buffer at
  a time, so a bomb stops at the limit instead of being inflated whole;
* :data:`MAX_LINE_BYTES`: bytes per line (read with a bounded ``readline``), and
  :data:`MAX_LINES` lines; a line that repeats an earlier one byte for byte is reported, not
  parsed again;
* :data:`MAX_DEPTH`: nesting of arrays and objects, measured on the raw text before parsing;
* :data:`MAX_INT`: the magnitude of an integer (seeds are 64-bit at most; 5,000 digits would
  cost the parser quadratic time and the replay an overflow);
* :data:`MAX_PROBLEMS`: unreadable lines reported before reading stops (a file of a million
  blank lines is one problem, not a million);
* non-finite numbers (``NaN``, ``Infinity``, ``1e999``) are refused: no recorded value is one.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT", "MAX_LINE_BYTES", "MAX_LINES", "MAX_PROBLEMS", "LineError", "parse_line"]

MAX_FILE_BYTES = 1 << 30  # 1 GiB decompressed
MAX_LINE_BYTES = 8 << 20  # 8 MiB per line
MAX_LINES = 100_000  # a suite of 100k episodes would take days to verify
MAX_DEPTH = 64
MAX_INT = 1 << 64
MAX_PROBLEMS = 100

_ESCAPE = re.compile(r"\\.", re.DOTALL)  # an escape pair: dropped first, so strings hold no backslash
_STRING = re.compile(r'"[^"]*"')  # linear: [^"]* cannot backtrack into a quote
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
_LONG_NUMBER = re.compile(r"\d{20}|[eE][+-]?0*\d{3}")  # may be too big: parse with checks (slow path)


class LineError(ValueError):
    """A line that is not one bounded JSON value; the message is one line saying why."""


def nesting_too_deep(text: str, limit: int = MAX_DEPTH) -> str | None:
    """Why ``text`` cannot be parsed within ``limit`` levels of nesting (None when it can).

    Works on the text, never recursing: strings are removed (escape pairs first, so a quote inside
    a string cannot end it), then innermost empty pairs are removed once per level. Each round is
    a linear regex pass, at most ``limit`` of them; what is left after that is nested deeper than
    ``limit``, and what stops shrinking is brackets that do not pair up.
    """
    if text.count("[") + text.count("{") <= limit:
        return None
    rest = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    for _ in range(limit):
        if not rest:
            return None
        shorter = _EMPTY_PAIR.sub("", rest)
        if shorter == rest:
            return "its brackets do not pair up (not valid JSON)"
        rest = shorter
    return None if not rest else f"arrays and objects are nested more than {limit} deep"


def _int(s: str) -> int:
    if len(s) > 21:  # beyond MAX_INT with room for a sign: refuse before converting
        raise LineError(f"an integer of {len(s)} digits (at most {MAX_INT:.2e} in magnitude is accepted)")
    v = int(s)
    if abs(v) > MAX_INT:
        raise LineError(f"the integer {s} is larger than {MAX_INT:.2e} (2^64)")
    return v


def _float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise LineError(f"the number {s[:30]} is not finite in double precision")
    return v


def _constant(s: str) -> float:
    raise LineError(f"{s} is not a JSON number (only finite numbers are accepted)")


def parse_line(text: str) -> Any:
    """One JSON value from one line, within the limits; :class:`LineError` says why not."""
    if len(text) > MAX_LINE_BYTES:
        raise LineError(f"the line has {len(text):,} characters, more than the limit of {MAX_LINE_BYTES:,}")
    why = nesting_too_deep(text)
    if why is not None:
        raise LineError(why)
    try:
        if _LONG_NUMBER.search(text) is None:  # the fast path: no number can be too large
            return json.loads(text, parse_constant=_constant)
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise LineError(f"not valid JSON ({e.msg} at column {e.colno}): the line is cut off or corrupt") from None
    except RecursionError:  # unreachable after the depth check; kept so no traceback can escape
        raise LineError(f"arrays and objects are nested more than {MAX_DEPTH} deep") from None
    except ValueError as e:  # an int(...) limit of the interpreter
        raise LineError(str(e).splitlines()[0][:200]) from None
