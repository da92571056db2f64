"""Answer forms: the result in the form the task asks for, before equivalence (answer_form, verify).

Each row: (answer, reference, form, given) -> accepted, or the start of the verdict.
"""

from __future__ import annotations

import pytest

from agentgym.environments.math.answer_form import FORM_NAMES, Form, parse_form
from agentgym.environments.math.verify import infer_form, reference_form_problem, verify
from agentgym.errors import ConfigError

ROWS: list[tuple[str, str, str, str | None, str]] = [
    # numbers: the result, not the question
    ("349", "349", "integer", None, "ok"),
    ("349.0", "349", "integer", None, "ok"),
    ("1,000", "1000", "integer", None, "ok"),
    ("5 apples", "5", "integer", None, "ok"),
    ("7 * (5 - 12)^2 + 30 / 5", "349", "integer", None, "not_final_form"),
    ("What is 7 * (5 - 12)^2 + 30 / 5?", "349", "integer", None, "not_final_form"),
    ("\\boxed{7 * (5 - 12)^2 + 30 / 5}", "349", "integer", None, "not_final_form"),
    ("7*49 + 6", "349", "integer", None, "not_final_form"),
    ("698/2", "349", "integer", None, "not_final_form"),
    ("349 = 7*49 + 6", "349", "integer", None, "not_final_form"),  # the value read is the expression
    ("7*49 + 6 = 349", "349", "integer", None, "ok"),  # worked, then the result
    # fractions in lowest terms
    ("7/4", "7/4", "fraction", None, "ok"),
    ("-\\frac{7}{4}", "-7/4", "fraction", None, "ok"),
    ("\\frac{-7}{4}", "-7/4", "fraction", None, "ok"),
    ("1 3/4", "7/4", "fraction", None, "ok"),
    ("14/8", "7/4", "fraction", None, "not_final_form: 14/8 is not in lowest terms (7/4)"),
    ("\\frac{14}{8}", "7/4", "fraction", None, "not_final_form"),
    ("7/1", "7", "fraction", None, "not_final_form"),
    ("1.75", "7/4", "fraction", None, "not_final_form: 1.75 is a decimal"),
    ("1.75", "7/4", "number", None, "ok"),
    ("3/-4", "-3/4", "number", None, "not_final_form"),
    ("2.5", "2.50", "decimal", None, "ok"),
    ("5/2", "2.5", "decimal", None, "not_final_form"),
    # complex numbers
    ("-15 + 3i", "-15.0 + 3.0i", "complex", None, "ok"),
    ("3i - 15", "-15 + 3i", "complex", None, "ok"),
    ("(-8 - 2i) + (-7 + 5i)", "-15 + 3i", "complex", None, "not_final_form"),
    ("-15 + 1i + 2i", "-15 + 3i", "complex", None, "not_final_form"),
    # evaluated expressions
    ("6x + 2", "6x + 2", "expression", None, "ok"),
    ("2 + 6x", "6x + 2", "expression", None, "ok"),
    ("2x*3 + 2", "6x + 2", "expression", None, "not_final_form: 2*x*3 has numbers left to multiply"),
    ("5x + x + 2", "6x + 2", "expression", None, "not_final_form"),  # like terms
    ("6x + 1 + 1", "6x + 2", "expression", None, "not_final_form"),
    ("1*6x + 2", "6x + 2", "expression", None, "not_final_form"),
    ("6x^1 + 2", "6x + 2", "expression", None, "not_final_form"),
    ("6x + 2 + 0", "6x + 2", "expression", None, "not_final_form"),
    ("12x/4", "3x", "expression", None, "not_final_form"),
    ("3x/2", "3x/2", "expression", None, "ok"),
    ("2\\sqrt{8}", "4\\sqrt{2}", "expression", None, "not_final_form: sqrt(8) is 2sqrt(2)"),
    ("4\\sqrt{2}", "4\\sqrt{2}", "expression", None, "ok"),
    ("1/x", "1/x", "expression", None, "ok"),
    ("\\frac{\\pi}{4}", "\\pi/4", "expression", None, "ok"),
    ("2\\pi/8", "\\pi/4", "expression", None, "not_final_form"),
    ("2x e^{3x} + 3x^2 e^{3x}", "2x e^(3x) + 3x^2 e^(3x)", "expression", None, "ok"),
    ("12(3x + 2)^3", "12(3x + 2)^3", "expression", None, "ok"),
    ("4*3(3x + 2)^3", "12(3x + 2)^3", "expression", None, "not_final_form"),
    # expand: no product of sums left
    ("x^2 - x - 2", "x^2 - x - 2", "expanded", "(x + 1)(x - 2)", "ok"),
    ("(x + 1)(x - 2)", "x^2 - x - 2", "expanded", "(x + 1)(x - 2)", "not_final_form"),
    ("(x - 2)(x + 1)", "x^2 - x - 2", "expanded", "(x + 1)(x - 2)", "not_final_form"),  # a rewritten copy
    ("(x + 1)^2", "x^2 + 2x + 1", "expanded", None, "not_final_form"),
    # factor: as many factors as the reference, not a sum
    ("(x - 1)(x + 1)", "(x - 1)(x + 1)", "factored", "x^2 - 1", "ok"),
    ("(x + 1)(x - 1)", "(x - 1)(x + 1)", "factored", "x^2 - 1", "ok"),
    ("x^2 - 1", "(x - 1)(x + 1)", "factored", "x^2 - 1", "not_final_form"),  # the input
    ("x^2 - 1 + 0", "(x - 1)(x + 1)", "factored", "x^2 - 1", "not_final_form"),
    ("x(x^2 - 1)", "x(x - 1)(x + 1)", "factored", None, "not_final_form: x*(x^2 - 1) has 2 non-constant"),
    ("2x + 2", "2(x + 1)", "factored", None, "not_final_form: 2*x + 2 is a sum"),
    ("2 × 2 × 5 × 7 × 7", "2 × 2 × 5 × 7 × 7", "factored", "980", "ok"),
    ("2^2 × 5 × 7^2", "2 × 2 × 5 × 7 × 7", "factored", "980", "ok"),
    ("980", "2 × 2 × 5 × 7 × 7", "factored", "980", "not_final_form"),
    ("4 × 5 × 49", "2 × 2 × 5 × 7 × 7", "factored", "980", "not_final_form"),
    # simplify: shorter than the input, no longer than the reference
    ("5x", "5x", "simplified", "2x + 3x", "ok"),
    ("2x + 3x", "5x", "simplified", "2x + 3x", "not_final_form"),  # the input
    ("3x + 2x", "5x", "simplified", "2x + 3x", "not_final_form"),  # a rewritten copy
    ("x*5", "5x", "simplified", "2x + 3x", "ok"),
    ("2x + 1", "2x + 1", "simplified", "(x + 1)^2 - x^2", "ok"),
    ("(x + 1)^2 - x^2", "2x + 1", "simplified", "(x + 1)^2 - x^2", "not_final_form"),
    # differentiate: the derivative, evaluated
    ("6x + 2", "6x + 2", "expression", "3x^2 + 2x + 5", "ok"),
    ("3x^2 + 2x + 5", "6x + 2", "expression", "3x^2 + 2x + 5", "not_final_form"),  # the input
    ("2*3x + 2", "6x + 2", "expression", "3x^2 + 2x + 5", "not_final_form"),
    # antiderivatives
    ("2sin(3x) + C", "2sin(3x) + C", "antiderivative", None, "ok"),
    ("2sin(3x)", "2sin(3x) + C", "antiderivative", None, "ok"),
    ("6/3 sin(3x) + C", "2sin(3x) + C", "antiderivative", None, "not_final_form"),
    # shapes
    ("x = -3 or x = 5", "-3, 5", "set[number]", None, "ok"),
    ("2/4, 5", "1/2, 5", "set[number]", None, "not_final_form"),
    ("x = 0, y = 0", "(0, 0)", "tuple[number]", None, "ok"),
    ("x + y = 0 and x - y = 0", "(0, 0)", "tuple[number]", None, "not_final_form"),  # the equations
    ("[1, oo)", "[1, oo)", "interval", None, "ok"),
    ("x >= 1", "[1, oo)", "interval", None, "ok"),
    # one value, plainly
    ("The answer is not 349.", "349", "integer", None, "negated"),
    ("\\ne 349", "349", "integer", None, "negated"),
    ("It is 349, not 350", "349", "integer", None, "ok"),
    ("It is 349, or maybe 350.", "349", "integer", None, "hedged"),
    ("349, 350", "349", "integer", None, "not equivalent"),
]


@pytest.mark.parametrize(("answer", "reference", "form", "given", "want"), ROWS)
def test_form_then_equivalence(answer: str, reference: str, form: str, given: str | None, want: str) -> None:
    v = verify(answer, reference, form, given)
    if want == "ok":
        assert v.correct, v.reason
    else:
        assert not v.correct and v.reason.startswith(want), v.reason


def test_every_reference_above_is_in_its_own_form() -> None:
    for _, reference, form, given, _ in ROWS:
        assert reference_form_problem(reference, form, given) is None, (reference, form)


@pytest.mark.parametrize(("reference", "form"), [
    ("3", "number"), ("7/4", "number"), ("-0.25", "number"), ("-15.0 + 3.0i", "complex"),
    ("6x + 2", "expression"), ("\\frac{\\pi}{4}", "expression"), ("x^2 + C", "antiderivative"),
    ("2 × 2 × 5", "factored"), ("-3, 5", "set[number]"), ("(2, 3)", "tuple[number]"),
    ("[1, 2)", "interval"), ("(-oo, 3)", "interval"), ("no solution", "any"),
])
def test_the_form_of_a_reference_is_inferred(reference: str, form: str) -> None:
    assert infer_form(reference) == form


def test_form_names_parse_and_unknown_ones_suggest() -> None:
    assert parse_form("set[fraction]") == Form("set", "fraction") and str(parse_form("set[fraction]")) == "set[fraction]"
    assert all(str(parse_form(n)) == n for n in FORM_NAMES)
    with pytest.raises(ConfigError, match="did you mean 'fraction'"):
        parse_form("fractoin")
    with pytest.raises(ConfigError, match="unknown answer form"):
        verify("1", "1", "set[any]")


def test_without_a_form_verify_checks_equivalence_only() -> None:
    assert verify("7 * (5 - 12)^2 + 30 / 5", "349").correct
    assert verify("14/8", "7/4").correct
