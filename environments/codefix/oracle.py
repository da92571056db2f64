"""Reference policies for CodeFix: the next action's tokens from the environment's state.

* :func:`oracle_policy` writes the canonical solution over ``solution.py`` (first turn),
  then submits: it scores 1 on every shipped task.
* :func:`noop_policy` submits the buggy file at once: it scores 0 on every shipped task.

Both take the environment (wrapped or not) and return a 1-D int64 array of token ids, as a
policy would sample them after the generation prompt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.errors import EnvStateError

__all__ = ["noop_policy", "oracle_policy"]


def _env(env: Any) -> Any:
    u = getattr(env, "unwrapped", env)
    if u.task is None or u.trajectory is None:
        raise EnvStateError("the policy needs a reset environment; call env.reset() first")
    return u


def oracle_policy(env: Any) -> np.ndarray:
    u = _env(env)
    codec, task = u.codec, u.task.answer
    if not u.trajectory.turns:
        ids = codec.tool_call_ids("write_file", {"path": "solution.py", "content": task.canonical_source},
                                  analysis="Restore the reference implementation.")
    else:
        ids = codec.tool_call_ids("submit", {})
    return np.asarray(ids, dtype=np.int64)


def noop_policy(env: Any) -> np.ndarray:
    return np.asarray(_env(env).codec.tool_call_ids("submit", {}), dtype=np.int64)
