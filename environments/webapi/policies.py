"""Reference policies over tokens: the oracle (follows the task's plan) and a do-nothing policy.

Each maps an environment (wrapped or not) in the middle of an episode to the next action's
token ids, built with ``codec.tool_call_ids`` / ``codec.final_ids`` exactly as a model would
sample them. The oracle scores 1 on every task; doing nothing scores 1 only where the right
outcome is to change nothing and no question is asked (forbidden requests).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["noop_action", "oracle_action", "run_episode"]


def oracle_action(env: gym.Env) -> np.ndarray:
    u: Any = env.unwrapped
    task = u.web_task
    step = u.counts["turns"]  # the oracle spends exactly one turn per plan step
    if step < len(task.plan):
        op, args = task.plan[step]
        ids = u.codec.tool_call_ids(op, args)
    else:
        ids = u.codec.final_ids(task.final_text)
    return np.asarray(ids, dtype=np.int64)


def noop_action(env: gym.Env) -> np.ndarray:
    return np.asarray(env.unwrapped.codec.final_ids("Sorry, I cannot help with that."), dtype=np.int64)  # type: ignore[attr-defined]


def run_episode(env: gym.Env, policy: Any = oracle_action, *, seed: int | None = None,
                options: dict[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
    """Play one episode; returns (total reward, last info)."""
    env.reset(seed=seed, options=options)
    total, info = 0.0, dict[str, Any]()
    while True:
        _, reward, terminated, truncated, info = env.step(policy(env))
        total += float(reward)
        if terminated or truncated:
            return total, info
