"""Answers that state something other than the value: each refused with a verdict that says why.

Negations written in words or LaTeX text (``\\text{not } 64``, ``other than 64``), bounds
(``at least 64``), unknown operators and functions (``\\operatorname{foo}(64)``,
``\\mathrm{foo}(64)``), self-corrections read
backwards (``64, no wait, 65`` is 65), digit groups that are not (``0,064``), a percent read two
ways (``6400%``), and the question echoed (its last number is sometimes the answer).
"""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.environments.math.generators import FAMILIES, LEVELS, generate
from agentgym.environments.math.verify import verify

# answer -> the verdict's first word, for the reference 64
REFUSED = {
    "\\text{not } 64": "negated",
    "\\boxed{\\text{not } 64}": "negated",
    "$\\mathrm{not}\\ 64$": "negated",
    "\\operatorname{not}(64)": "negated",
    "other than 64": "negated",
    "The answer is anything other than 64.": "negated",
    "except 64": "negated",
    "The answer is any number except 64": "negated",
    "neither 64": "negated",
    "The answer is neither 64 nor 65.": "negated",
    "unequal to 64": "negated",
    "It is different from 64": "negated",
    "\\boxed{anything but 64}": "negated",
    "\\operatorname{foo}(64)": "unparseable",
    "\\boxed{\\operatorname{foo}(64)}": "unparseable",
    "\\operatorname{floor}(64.5)": "unparseable",
    "\\mathrm{foo}(64)": "unparseable",
    "\\text{foo}(64)": "unparseable",
    "foo (64)": "unparseable",
    "64, no wait, 65": "not",
    "The answer is 64, no wait, 65.": "not",
    "64. Actually, it is 65.": "not",
    "64; sorry, 65": "not",
    "0,064": "not",
    "at least 64": "bound",
    "The answer is at least 64.": "bound",
    "\\boxed{\\text{at least } 64}": "bound",
    "There are more than 64": "bound",
    "no fewer than 64": "bound",
    "It exceeds 64": "bound",
    "The answer cannot be 64": "negated",
    "It is not the case that the answer is 64": "negated",
    "Initially 64 but actually 65": "not",
    "64, err, 65": "not",
    "6400%": "not",
    "6400\\%": "not",
}


@pytest.mark.parametrize("form", ["integer", "number", None])
@pytest.mark.parametrize("answer", list(REFUSED))
def test_refused_for_64(answer: str, form: str | None) -> None:
    v = verify(answer, "64", form)
    assert not v.correct, v.reason
    assert v.reason.split(":")[0].split(" ")[0] == REFUSED[answer], v.reason


@pytest.mark.parametrize("answer, reference", [
    ("64, no wait, 65", "65"),
    ("The answer is 64, no wait, 65.", "65"),
    ("64. Actually, it is 65.", "65"),
    ("64; sorry, 65", "65"),
    ("x = 3, or rather x = 4", "4"),
    ("Initially 64 but actually 65", "65"),
    ("Since x is not negative, the answer is 64.", "64"),  # a negation of something else
    ("The answer is 64. Actually, let me check: 8 * 8 = 64.", "64"),
    ("6400%", "6400"),  # the percent the question asked for
    ("50%", "1/2"),  # a percent as a value where the answer is no whole number
    ("0.064", "0.064"),
    ("1,064", "1064"),
    ("It is 64, not 65.", "64"),  # a negation of another value
    ("\\operatorname{sin}(x)", "\\sin x"),  # an operator the grammar knows
    ("No, the answer is 64.", "64"),
    ("it is (64)", "64"),
    ("\\mathrm{sin}(x)", "\\sin x"),
    ("The number of marbles that are not red is 64.", "64"),
    ("x = 3. Actually, that checks out: x = 3.", "3"),
])
def test_still_accepted(answer: str, reference: str) -> None:
    v = verify(answer, reference)
    assert v.correct, v.reason


def test_a_percent_has_one_reading_per_reference() -> None:
    """6400% is 6400 where the reference is a whole number, 64 where it is not: never both."""
    for form in ("integer", "number", None):
        assert verify("6400%", "6400", form).correct
        assert not verify("6400%", "64", form).correct
    assert verify("50%", "0.5").correct and not verify("50%", "50.5").correct
    assert verify("30°", "\\frac{\\pi}{6}").correct and not verify("30°", "6").correct


def _sample(per: int) -> list:
    out = []
    for family in FAMILIES:
        for k, level in enumerate(LEVELS):
            for split in ("train", "eval"):
                for i in range(per):
                    rng = np.random.default_rng([i, list(FAMILIES).index(family), k])
                    out.append(generate(family, level, rng, split))
    return out


def test_the_echoed_question_earns_nothing_anywhere() -> None:
    """Every family, level and split: the question (as it is, boxed, after "The answer is",
    lower-cased, or its last clause) earns 0 where it is given; the right answer still pays,
    also after a copy of the question. Without the question, some of these echoes pay (the
    definite integral whose upper bound is the answer): the sample holds such cases."""
    paid_without = 0
    for p in _sample(10):
        q = p.question
        tail = q[q.rfind(" from "):] if " from " in q else q[q.rfind(":") + 1:]
        for echo in (q, f"\\boxed{{{q}}}", f"The answer is {q}", q.lower(), tail, f"The answer is {tail}"):
            v = verify(echo, p.answer, p.form, p.given, question=q)
            assert not v.correct, (q, echo, v.reason)
            paid_without += verify(echo, p.answer, p.form, p.given).correct
        for right in (p.answer, f"The answer is {p.answer}.", f"{q}\n\nThe answer is \\boxed{{{p.answer}}}"):
            v = verify(right, p.answer, p.form, p.given, question=q)
            assert v.correct, (q, right, v.reason)
    assert paid_without > 0


def test_echo_verdicts() -> None:
    q = "Evaluate the definite integral of 6x - 5 with respect to x from x = 0 to x = 2."
    assert verify(q, "2", "number").correct  # without the question: the bound x = 2 is read
    v = verify(q, "2", "number", question=q)
    assert not v.correct and v.reason.startswith("echoed")
    v = verify("The answer is from x = 0 to x = 2.", "2", "number", question=q)
    assert not v.correct and v.reason.startswith("echoed")
    assert verify("x = 2", "2", "number", question="Solve for x: 3x = 6.").correct
    q = "Which colour is the sky on a clear day: dark green or light blue?"
    assert verify("light blue", "light blue", question=q).correct  # a text answer may quote its options
    assert verify("The answer is light blue.", "light blue", question=q).correct
