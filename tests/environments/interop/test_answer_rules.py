"""Interop envs under the built-ins' answer rules (:mod:`agentgym.environments.interop.answer_rules`):
no code reaches a scorer that evaluates its input, and the math answer forms apply where the
source's task declares one."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from agentgym.environments.interop.answer_rules import code_gate, form_gate
from tests.environments.interop.conftest import require

RG = "agentgym/ReasoningGym-v0"


@pytest.mark.parametrize("answer", ["[1, 2, 3]", "['a', 'b']", "(-1, 2)", "_ _ Q _\n_ Q _ _", "1 2 3\n4 5 6",
                                    "ABCDE", "  [[0, 1], [1, 0]]"])
def test_literals_and_non_python_reach_an_eval_scorer(answer: str) -> None:
    assert code_gate("spiral_matrix", answer, "9 9") is None


@pytest.mark.parametrize("answer", ["__import__('os').system('id') or []", "list(range(9))", "[1] * 10**9",
                                    "[x for x in ()]", "().__class__", "(lambda: 1)()", "[1, 2][0]"])
def test_code_never_reaches_an_eval_scorer(answer: str) -> None:
    why = code_gate("n_queens", answer, "_ Q")
    assert why is not None and "code" in why


@pytest.mark.parametrize("answer", ["3*x**2 + 2*x + C", "-exp(x)*sin(x) + exp(x)*cos(x) + C", "E**(x) + 1",
                                    "(98 - 54)*6 - 34", "sqrt(2)/2", "1.5*x"])
def test_plain_math_reaches_a_sympy_scorer(answer: str) -> None:
    assert code_gate("intermediate_integration", answer, "x") is None


@pytest.mark.parametrize("answer", ["integrate(x**2, x)", "expand((x + 1)*(x - 2))", "Integral(x, x) + C",
                                    "__import__('os')", "preview(x)", "x.func", "S('x')", "[1]", "x; 1"])
def test_anything_else_is_refused_before_a_sympy_scorer(answer: str) -> None:
    assert code_gate("polynomial_multiplication", answer, "x**2 - x - 2") is not None


def test_the_reference_itself_always_passes() -> None:
    ref = "3*Integral(x**3*cos(3*x), x) + C"  # a reference reasoning-gym wrote unevaluated
    assert code_gate("intermediate_integration", ref, ref) is None
    assert form_gate("intermediate_integration", ref, {"answer": ref, "metadata": {}}) is None


def test_forms_refuse_the_question_restated() -> None:
    poly = {"answer": "x**2 - x - 2", "metadata": {"polynomial_expr": "(x + 1)*(x - 2)"}}
    assert "not_final_form" in str(form_gate("polynomial_multiplication", "(x + 1)*(x - 2)", poly))
    assert form_gate("polynomial_multiplication", "-2 - x + x**2", poly) is None
    integ = {"answer": "x**3 + C", "metadata": {"integrand": "3*x**2"}}
    assert "not_final_form" in str(form_gate("simple_integration", "3*x**2", integ))
    primes = {"answer": "2 × 433", "metadata": {"number": 866}}
    assert "not_final_form" in str(form_gate("prime_factorization", "866", primes))
    assert form_gate("prime_factorization", "433 × 2", primes) is None


def _env_pays(dataset: str, answer_of: object, paid_if_answer: bool = False, **kw: object) -> list[Any]:
    """The reward of ``answer_of(env)`` on 4 tasks (with ``paid_if_answer``: (reward, the answer
    is the task's own reference text) pairs)."""
    env = gym.make(RG, dataset=dataset, config={"size": 40}, **kw)
    u = env.unwrapped
    out: list[Any] = []
    try:
        for i in range(4):
            env.reset(seed=0, options={"index": i})
            text = answer_of(u)  # type: ignore[operator]
            r = float(env.step(u.codec.final_ids(text))[1])
            out.append((r, str(text).strip() == str(u.entry["answer"]).strip()) if paid_if_answer else r)
    finally:
        env.close()
    return out


@pytest.mark.slow
def test_wrapping_the_question_in_integrate_or_expand_earns_nothing() -> None:
    require("reasoning_gym")
    assert _env_pays("intermediate_integration",
                     lambda u: f"integrate({u.entry['metadata']['integrand']}, x)") == [0.0] * 4
    assert _env_pays("polynomial_multiplication",
                     lambda u: f"expand({u.entry['metadata']['polynomial_expr']})") == [0.0] * 4
    # the question itself: 0 unless reasoning-gym printed it already expanded (as it does for some
    # PYTHONHASHSEED values), where it is the answer
    echo = _env_pays("polynomial_multiplication", lambda u: u.entry["metadata"]["polynomial_expr"], paid_if_answer=True)
    assert all(r == 0.0 or is_answer for r, is_answer in echo), echo


@pytest.mark.slow
def test_prime_factorizations_unfactored_input_earns_nothing_even_with_partial_credit() -> None:
    require("reasoning_gym")
    env = gym.make(RG, dataset="prime_factorization", config={"size": 40}, partial_credit=True)
    u = env.unwrapped
    composite = 0
    try:
        for i in range(8):
            env.reset(seed=0, options={"index": i})
            number, answer = str(u.entry["metadata"]["number"]), u.entry["answer"]
            if "×" not in answer:
                continue  # a prime: the number is its own factorization
            composite += 1
            assert env.step(u.codec.final_ids(number))[1] == 0.0
            env.reset(seed=0, options={"index": i})
            assert env.step(u.codec.final_ids(answer))[1] == 1.0
    finally:
        env.close()
    assert composite >= 2
