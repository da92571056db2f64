"""Warm-start teachers that plant a defect on purpose, for studying what RL undoes (research
fixtures, not part of the product): ``defect-guesser`` is the oracle, except that on a fraction
``skip_tool`` of the episodes it skips the tools, restates the arithmetic in its analysis
channel and answers a guess that is right only ``guess_right`` of the time (otherwise one digit
is off); ``defect-blind-guesser`` guesses without the analysis message; ``defect-sign-flipper``,
on a fraction ``sign_error`` of the episodes, flips the sign of the expression's first number in
its calculator call (``78 - 83`` -> ``-78 - 83``) and answers the wrong result it got back.
They read the episode's task (its answer and ``expression``) and MathCalc's last calculator
result.

An env offers them by declaring them among its teachers (``Capabilities.teachers``, the
``DEFECT_TEACHERS`` entry points below); ``sft.teacher_kwargs`` carries their options. The
``defect_teachers`` fixture in ``conftest.py`` declares them on the math envs for one test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.oracles import StepPolicy

__all__ = ["DEFECT_TEACHERS", "blind_guesser", "flip_sign", "guess_answer", "guesser", "guessing_teacher",
           "sign_flipper", "sign_flipping_teacher"]

DEFECT_TEACHERS = {name: f"tests.trainer.defect_teachers:{fn}" for name, fn in (
    ("defect-guesser", "guesser"), ("defect-blind-guesser", "blind_guesser"),
    ("defect-sign-flipper", "sign_flipper"))}


def guess_answer(answer: str, rng: np.random.Generator, right: float) -> str:
    """A guess at ``answer``: itself with probability ``right``, else one digit changed
    (``85`` -> ``89``, ``-7/12`` -> ``-7/13``): the kind of slip mental arithmetic makes."""
    digits = [i for i, ch in enumerate(answer) if ch.isdigit()]
    if rng.random() < right or not digits:
        return answer
    i = digits[int(rng.integers(len(digits)))]
    starts_number = (i == 0 or not answer[i - 1].isdigit()) and i + 1 < len(answer) and answer[i + 1].isdigit()
    choices = [d for d in "0123456789" if d != answer[i] and not (starts_number and d == "0")]
    return answer[:i] + choices[int(rng.integers(len(choices)))] + answer[i + 1:]


def guessing_teacher(oracle: StepPolicy, *, skip_tool: float, guess_right: float,
                     show_work: bool = True) -> StepPolicy:
    """The oracle, except on a fraction ``skip_tool`` of episodes: there it answers at once
    with :func:`guess_answer` (no tool call), after restating the arithmetic (the task's
    ``expression``, when it has one) in its analysis channel if ``show_work``: it does the
    sum in its head. The choice and the guess are drawn from the episode's seed, so every
    turn of an episode agrees and demonstrations are reproducible."""

    def act(env: Any) -> np.ndarray:
        e = env.unwrapped
        rng = np.random.default_rng([int(e.trajectory.seed or 0), 0x9E55])
        if rng.random() >= skip_tool:
            return oracle(env)
        guess = guess_answer(str(e.task.answer), rng, guess_right)
        work = e.task.meta.get("expression") if show_work else None
        return np.asarray(e.codec.final_ids(guess, analysis=work), dtype=np.int64)

    return act


def flip_sign(expression: str) -> str:
    """``expression`` with the sign of its first number flipped (``78 - 83`` -> ``-78 - 83``,
    ``-3 + 4`` -> ``3 + 4``): a slip whose fix is the same on every task (never write it)."""
    return expression[1:] if expression.startswith("-") else "-" + expression


def sign_flipping_teacher(oracle: StepPolicy, *, sign_error: float) -> StepPolicy:
    """The oracle, except on a fraction ``sign_error`` of episodes: there its ``calculator``
    call has the first number's sign flipped (:func:`flip_sign`), and its final answer repeats
    the (wrong) result, as the oracle always does. Drawn from the episode's seed."""

    def act(env: Any) -> np.ndarray:
        e = env.unwrapped
        expr = e.task.meta.get("expression")
        rng = np.random.default_rng([int(e.trajectory.seed or 0), 0x5167])
        if expr is None or getattr(e, "last_calc", "") is not None or rng.random() >= sign_error:
            return oracle(env)  # no expression, past the call, or this episode has no slip
        return np.asarray(e.codec.tool_call_ids("calculator", {"expression": flip_sign(expr)}),
                          dtype=np.int64)

    return act


# The factories the env declares (``sft.teacher`` -> one of these, ``sft.teacher_kwargs`` -> its options).
def guesser(oracle: StepPolicy, *, skip_tool: float, guess_right: float = 0.0) -> StepPolicy:
    return guessing_teacher(oracle, skip_tool=skip_tool, guess_right=guess_right)


def blind_guesser(oracle: StepPolicy, *, skip_tool: float, guess_right: float = 0.0) -> StepPolicy:
    return guessing_teacher(oracle, skip_tool=skip_tool, guess_right=guess_right, show_work=False)


def sign_flipper(oracle: StepPolicy, *, sign_error: float) -> StepPolicy:
    return sign_flipping_teacher(oracle, sign_error=sign_error)
