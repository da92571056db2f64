"""Problem generators: speed-independent properties and answers checked independently with sympy."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from agentgym.environments.math.generators import FAMILIES, FORMS, LEVELS, generate
from agentgym.environments.math.verify import reference_form_problem, verify
from agentgym.splits import hash_split, problem_digest

X, Y = sp.symbols("x y")
_TF = (*standard_transformations, implicit_multiplication_application, convert_xor)


def _sym(text: str) -> sp.Expr:
    # Test-only: trusted generator output, parsed by sympy as an independent second opinion.
    return parse_expr(text.replace("e^", "E^"), transformations=_TF, local_dict={"x": X, "y": Y, "E": sp.E})


def _problems(family: str, level: str, n: int = 25) -> list:
    rng = np.random.default_rng(123)
    return [generate(family, level, rng) for _ in range(n)]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("level", LEVELS)
def test_problem_shape_and_self_verification(family: str, level: str) -> None:
    for p in _problems(family, level):
        assert re.fullmatch(rf"math/{family}/[0-9a-f]{{12}}", p.id)
        assert p.id == f"math/{family}/{problem_digest(p.question)}" and p.split == hash_split(p.question)
        assert p.question and p.answer and (p.family, p.level) == (family, level)
        assert p.form == FORMS[family] and reference_form_problem(p.answer, p.form) is None, p
        assert verify(p.answer, p.answer, p.form).correct
        assert not verify("0.123456", p.answer, p.form).correct


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_split_asked_for_is_the_split_generated(family: str) -> None:
    rng = np.random.default_rng(5)
    for split in ("train", "eval") * 10:
        p = generate(family, "medium", rng, split)
        assert p.split == split == hash_split(p.question)


def test_same_rng_state_same_problem() -> None:
    for family in FAMILIES:
        for level in LEVELS:
            a = generate(family, level, np.random.default_rng(9))
            b = generate(family, level, np.random.default_rng(9))
            assert a == b


def test_problems_vary() -> None:
    for family in FAMILIES:
        qs = {p.question for p in _problems(family, "medium", 30)}
        assert len(qs) > 15, family


@pytest.mark.parametrize("level", LEVELS)
def test_arithmetic_answers(level: str) -> None:
    for fam in ("arithmetic", "order_of_operations", "fractions", "word_problem"):
        for p in _problems(fam, level):
            assert p.expression is not None
            assert _sym(p.expression) == sp.Rational(p.answer), p


@pytest.mark.parametrize("level", LEVELS)
def test_equation_answers(level: str) -> None:
    for p in _problems("linear_equation", level):
        lhs, rhs = p.question.removeprefix("Solve for x: ").rstrip(".").split(" = ")
        assert sp.solve(_sym(lhs) - _sym(rhs), X) == [sp.Rational(p.answer)]
    for p in _problems("quadratic", level):
        poly = p.question.removeprefix("Solve ").split(" = 0")[0]
        roots = sorted(sp.solve(_sym(poly), X))
        assert roots == [sp.Rational(r) for r in p.answer.split(", ")]
    for p in _problems("linear_system", level):
        m = re.match(r"Solve the system (.*) = (-?\d+) and (.*) = (-?\d+)\.", p.question)
        assert m
        sol = sp.solve([_sym(m[1]) - int(m[2]), _sym(m[3]) - int(m[4])], [X, Y])
        assert f"({sol[X]}, {sol[Y]})" == p.answer


@pytest.mark.parametrize("level", LEVELS)
def test_calculus_answers(level: str) -> None:
    for p in _problems("derivative", level):
        f = p.question.split("f(x) = ")[1].split(" with respect")[0]
        assert sp.simplify(sp.diff(_sym(f), X) - _sym(p.answer)) == 0, p
    for p in _problems("indefinite_integral", level):
        f = p.question.split("integral of ")[1].split(" with respect")[0]
        anti = _sym(p.answer.replace(" + C", ""))
        assert sp.simplify(sp.diff(anti, X) - _sym(f)) == 0, p
    for p in _problems("definite_integral", level):
        m = re.match(r"Evaluate the definite integral of (.*) with respect to x from x = (-?\d+) to x = (-?\d+)\.",
                     p.question)
        assert m
        assert sp.integrate(_sym(m[1]), (X, int(m[2]), int(m[3]))) == sp.Rational(p.answer), p
