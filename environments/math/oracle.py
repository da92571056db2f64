"""Oracle policies: the exact tokens a perfect policy samples. For tests, benchmarks and SFT demos."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.errors import EnvStateError

__all__ = ["oracle_action", "oracle_actions"]


def _unwrap(env: Any) -> Any:
    inner = getattr(env, "unwrapped", env)
    if inner.task is None:
        raise EnvStateError("the oracle needs a task: call env.reset() first")
    return inner


def oracle_action(env: Any) -> np.ndarray:
    """Math-v1: the final answer, exactly the reference (``codec.final_ids(answer)``)."""
    e = _unwrap(env)
    return np.asarray(e.codec.final_ids(e.task.answer), dtype=np.int64)


def oracle_actions(env: Any) -> np.ndarray:
    """MathCalc-v1: the next action given the episode so far.

    First a ``calculator`` call with the problem's expression, then a final answer that
    repeats the calculator's output. Problems without an expression go straight to the answer.
    """
    e = _unwrap(env)
    expr = e.task.meta.get("expression")
    last = getattr(e, "last_calc", None)
    if expr is None or not hasattr(e, "last_calc"):
        return oracle_action(env)
    if last is None:
        return np.asarray(e.codec.tool_call_ids("calculator", {"expression": expr}), dtype=np.int64)
    return np.asarray(e.codec.final_ids(last), dtype=np.int64)
