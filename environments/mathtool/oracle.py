"""MathTool-v1's reference policy: compute in the sandbox when there is arithmetic, then answer.

First turn: if the problem has a plain arithmetic ``expression``, call ``python`` with code
that evaluates it exactly (``Fraction``, ``^`` read as power). Next turn (or at once when
there is nothing to compute): the final answer, which is the reference answer.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from agentgym.errors import EnvStateError

__all__ = ["oracle_policy", "python_code_for"]


def python_code_for(expression: str) -> str:
    """Code that prints ``expression`` evaluated exactly (integers and decimals as Fractions)."""
    return (
        "import re\nfrom fractions import Fraction\n"
        f"expr = {json.dumps(expression)}.replace('^', '**')\n"
        "expr = re.sub(r'(\\d+(?:\\.\\d+)?)', r'Fraction(\"\\1\")', expr)\n"
        "print(eval(expr))\n"
    )


def oracle_policy(env: Any) -> np.ndarray:
    e = getattr(env, "unwrapped", env)
    if e.task is None or e.trajectory is None:
        raise EnvStateError("the oracle needs a reset environment: call env.reset() first")
    expr = e.task.meta.get("expression")
    if expr and not e.trajectory.turns:
        ids = e.codec.tool_call_ids("python", {"code": python_code_for(expr)})
    else:
        ids = e.codec.final_ids(e.task.answer)
    return np.asarray(ids, dtype=np.int64)
