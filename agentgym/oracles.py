"""Scripted policies for every built-in environment, by env id.

An oracle is a function ``env -> next action tokens`` that reads the episode's state (the
task, earlier tool results) and returns exactly what a perfect policy would sample. They
drive tests, benchmarks, the ``agentgym demo`` command and the trainer's warm-start
demonstrations.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from agentgym.errors import ConfigError
from agentgym.trajectory import Trajectory

__all__ = ["ORACLES", "get_oracle", "run_oracle"]

Policy = Callable[[Any], np.ndarray]

ORACLES: dict[str, str] = {
    "agentgym/Math-v1": "agentgym.environments.math.oracle:oracle_action",
    "agentgym/MathCalc-v1": "agentgym.environments.math.oracle:oracle_actions",
    "agentgym/MathTool-v1": "agentgym.environments.mathtool.oracle:oracle_policy",
    "agentgym/CodeFix-v1": "agentgym.environments.codefix.oracle:oracle_policy",
    "agentgym/WebAPI-v1": "agentgym.environments.webapi.policies:oracle_action",
}


def get_oracle(env_id: str) -> Policy:
    try:
        module, fn = ORACLES[env_id].split(":")
    except KeyError:
        raise ConfigError(f"no oracle for {env_id!r}; known: {sorted(ORACLES)}") from None
    return getattr(importlib.import_module(module), fn)  # type: ignore[no-any-return]


def run_oracle(env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None,
               policy: Policy | None = None) -> Trajectory:
    """Play one episode with the env's oracle (or ``policy``) and return its record."""
    inner = env.unwrapped
    policy = policy or get_oracle(inner.env_id)
    env.reset(seed=seed, options=options)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(policy(env))
        done = terminated or truncated
    traj: Trajectory = inner.trajectory
    return traj
