"""``agentgym/MathCalc-v1``: the same problems plus a ``calculator`` tool; the trainer's CPU task.

The intended episode is two turns: call ``calculator`` with the arithmetic, read the number
it returns, answer it in the final channel. Only the number is an answer (the ``integer`` form
of its families): the question or its expression restated earns 0, so the calculator's
result is the only way to the reward. Defaults are short, easy questions ("What is
37 + 48?") so a ~1M-parameter model can learn the loop. The calculator parses with the
verifier's guarded grammar (no ``eval``) and answers exactly: ``85``, ``-7/12``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from agentgym.environments.math.env import MathEnv
from agentgym.environments.math.expr import ExprError, TooLarge, parse
from agentgym.environments.math.values import NotRational, eval_exact
from agentgym.tools import Tool, ToolResult

__all__ = ["MathCalcEnv", "calculate"]

DEFAULT_FAMILIES = ("arithmetic", "order_of_operations")
DEFAULT_LEVELS = ("easy",)


def calculate(expression: str) -> str:
    """Evaluate arithmetic exactly: integers and decimals, ``+ - * / ^ **``, parentheses.

    Returns ``"85"`` or ``"-7/12"``; raises :class:`ExprError` (or ``TooLarge``) with a reason.
    """
    node = parse(expression)
    try:
        v: Fraction = eval_exact(node)
    except NotRational:
        raise ExprError("only arithmetic on numbers is supported: + - * / ^ and parentheses") from None
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


class MathCalcEnv(MathEnv):
    default_id = "agentgym/MathCalc-v1"
    instructions = ("Use the calculator tool to compute the answer, then reply in the final "
                    "channel with only the number.")

    def __init__(
        self,
        *,
        families: Sequence[str] | str | None = DEFAULT_FAMILIES,
        levels: Sequence[str] | str | None = DEFAULT_LEVELS,
        dataset: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(families=families, levels=levels, dataset=dataset, **kwargs)
        self.last_calc: str | None = None  # the calculator's latest output (the oracle reads it)
        self._calc_tool = Tool(
            "calculator",
            "Evaluates an arithmetic expression exactly and returns the number.",
            {"type": "object",
             "properties": {"expression": {"type": "string", "description": "e.g. 37 + 48",
                                           "maxLength": 2000}},
             "required": ["expression"], "additionalProperties": False},
            self._calculator,
        )

    def on_reset(self) -> None:
        self.last_calc = None

    def tools(self) -> list[Tool]:
        return [self._calc_tool]

    def _calculator(self, expression: str) -> ToolResult:
        try:
            out = calculate(expression)
        except TooLarge as e:
            return ToolResult.failure("too_large", str(e))
        except ExprError as e:
            return ToolResult.failure("bad_expression", f"{e}; example: 37 + 48")
        self.last_calc = out
        return ToolResult(out)
