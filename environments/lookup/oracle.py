"""The Lookup-v1 oracle: look up the chain link by link, retry a failed call, answer the end."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.errors import EnvStateError

__all__ = ["oracle_policy"]


def oracle_policy(env: Any) -> np.ndarray:
    """The next action given the episode so far: ``lookup`` of the current code (again after a
    transient failure) until the chain's depth is walked, then the code reached."""
    e = getattr(env, "unwrapped", env)
    if e.task is None:
        raise EnvStateError("the oracle needs a task: call env.reset() first")
    if e.hops < e.task.meta["depth"]:
        return np.asarray(e.codec.tool_call_ids("lookup", {"code": e.position}), dtype=np.int64)
    return np.asarray(e.codec.final_ids(e.position), dtype=np.int64)
