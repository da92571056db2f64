"""The answer verifier: the labelled equivalence suite, hostile inputs, threads."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from agentgym.environments.math.calc import calculate
from agentgym.environments.math.expr import ExprError, TooLarge
from agentgym.environments.math.verify import Verdict, verify

PAIRS_PATH = Path(__file__).with_name("equivalence_pairs.jsonl")
PAIRS = [json.loads(line) for line in PAIRS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_suite_is_large_and_balanced() -> None:
    assert len(PAIRS) >= 300
    positives = sum(p["equivalent"] for p in PAIRS)
    assert 0.3 < positives / len(PAIRS) < 0.8
    assert len({(p["predicted"], p["reference"]) for p in PAIRS}) == len(PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{p['category']}-{i}" for i, p in enumerate(PAIRS)])
def test_equivalence_pair(pair: dict) -> None:
    v = verify(pair["predicted"], pair["reference"])
    assert isinstance(v, Verdict)
    assert v.correct is pair["equivalent"], v.reason
    assert v.reason


def test_verdict_reasons() -> None:
    assert verify("hello", "3").reason.startswith("unparseable")
    assert verify("2**2**2**99", "3").reason.startswith("too_large")
    assert verify("4", "3").reason.startswith("not equivalent")
    assert verify("x = 3", "3").parsed == "3"
    assert verify("", "3").parsed is None
    assert verify(None, "3").correct is False  # type: ignore[arg-type]


def test_text_reference_compared_as_text() -> None:
    assert verify("Yes", "yes").correct
    assert not verify("no", "yes").correct


HOSTILE = [
    "2**2**2**99", "10**10**10", "9^9^9^9", "10^{10^{10}}", "(" * 100_000 + "1" + ")" * 100_000,
    "1" * 1_000_000, "x" * 1_000_000, "\\frac{" * 1000 + "1" + "}{2}" * 1000, "-" * 1999 + "1",
    "e^{e^{e^{e^{100}}}}", "\\sqrt{" * 59 + "2" + "}" * 59, "((((((x+1)^2)^2)^2)^2)^2)^2" * 20,
    ",".join(["{" + ",".join(str(i) for i in range(40)) + "}"] * 40), "1e9999^1e9999",
    "sin(" * 55 + "1" + ")" * 55, "2^(2^(2^(2^(2^(2^2)))))",
]


def _bounded(fn, *args: object, limit: float = 20.0) -> object:
    """Run fn in a thread; a hang fails the test instead of hanging CI."""
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(fn(*args)), daemon=True)
    start = time.perf_counter()
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"{fn.__name__} did not return within {limit}s"
    assert box, "the call raised instead of returning"
    return box[0], time.perf_counter() - start


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_inputs_are_bounded(text: str) -> None:
    verdict, _ = _bounded(verify, text, "3")
    assert isinstance(verdict, Verdict) and not verdict.correct


def test_hostile_reference_side_is_bounded() -> None:
    verdict, _ = _bounded(verify, "3", "2^(2^(2^(2^(2^(2^2)))))")
    assert not verdict.correct


def test_verify_is_thread_safe() -> None:
    """Many threads at once (each with its own mpmath context) agree with the serial run."""
    sample = PAIRS[::3]
    expected = [verify(p["predicted"], p["reference"]).correct for p in sample]
    results: dict[int, list[bool]] = {}

    def work(k: int) -> None:
        results[k] = [verify(p["predicted"], p["reference"]).correct for p in sample]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(results[k] == expected for k in range(6))


@pytest.mark.parametrize(("expr", "out"), [
    ("37 + 48", "85"), ("7 * (6 - 6)^2 + 33 / 3", "11"), ("1/3 + 1/4", "7/12"), ("2.5 * 4", "10"),
    ("-5 - 3", "-8"), ("2**10", "1024"), ("(4 + 8) * 4 - 18", "30"),
])
def test_calculator_exact(expr: str, out: str) -> None:
    assert calculate(expr) == out


@pytest.mark.parametrize("expr", ["x + 1", "sqrt(2)", "1/0", "", "import os", "2 +", "pi"])
def test_calculator_rejects(expr: str) -> None:
    with pytest.raises(ExprError):
        calculate(expr)


@pytest.mark.parametrize("expr", ["2**2**2**99", "10**10**10", "(" * 5000 + "1" + ")" * 5000, "9" * 300])
def test_calculator_guards(expr: str) -> None:
    def run() -> str:
        try:
            return calculate(expr)
        except TooLarge as e:
            return f"too large: {e}"
    out, _ = _bounded(run)
    assert str(out).startswith("too large")


# ---------------------------------------------------------------------------- fuzzing
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = [*"0123456789+-*/^()[]{}|,.=<> xyCe!$%", "\\frac", "\\sqrt", "\\pi", "\\boxed", "\\infty",
           "\\cup", "\\pm", "sin", "ln", "**", "\\left("]
_MATHY = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(pred=_MATHY, ref=st.sampled_from(["3", "1/2", "(1, 2)", "-3, 2", "[0, oo)", "x^2 + C", "\\sqrt{2}"]))
def test_verify_never_raises(pred: str, ref: str) -> None:
    v = verify(pred, ref)
    assert isinstance(v.correct, bool) and v.reason


@settings(max_examples=200, deadline=None)
@given(expr=_MATHY)
def test_calculator_raises_only_expr_errors(expr: str) -> None:
    try:
        out = calculate(expr)
    except ExprError:
        return
    assert out.lstrip("-").replace("/", "").isdigit()
