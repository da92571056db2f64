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

__all__ = ["ORACLES", "get_oracle", "load_callable", "run_oracle"]

Policy = Callable[[Any], np.ndarray]

ORACLES: dict[str, str] = {
    "agentgym/Math-v1": "agentgym.environments.math.oracle:oracle_action",
    "agentgym/MathCalc-v1": "agentgym.environments.math.oracle:oracle_actions",
    "agentgym/MathTool-v1": "agentgym.environments.mathtool.oracle:oracle_policy",
    "agentgym/CodeFix-v1": "agentgym.environments.codefix.oracle:oracle_policy",
    "agentgym/WebAPI-v1": "agentgym.environments.webapi.policies:oracle_action",
    # Imported envs: the adapter's own oracle where its source has one (it says why not otherwise).
    "agentgym/ReasoningGym-v0": "agentgym.environments.interop.oracle:oracle_action",
    "agentgym/Verifiers-v0": "agentgym.environments.interop.oracle:oracle_action",
    "agentgym/OpenEnv-v0": "agentgym.environments.interop.oracle:oracle_action",
    "agentgym/SkyRL-v0": "agentgym.environments.interop.oracle:oracle_action",
}


def load_callable(spec: str, what: str = "oracle") -> Callable[..., Any]:
    """``"module:function"`` -> the function, or a ConfigError that says which part is missing."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"{what} must be 'module:function', got {spec!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"{what} {spec!r}: cannot import module {module!r} ({e}); is it installed and "
                          "on PYTHONPATH?") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ConfigError(f"{what} {spec!r}: module {module!r} has no function {name!r}")
    return fn  # type: ignore[no-any-return]


def get_oracle(env_id: str) -> Policy:
    if env_id not in ORACLES:
        raise ConfigError(f"no oracle for {env_id!r}; known: {sorted(ORACLES)}")
    return load_callable(ORACLES[env_id])


def run_oracle(env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None,
               policy: Policy | None = None) -> Trajectory:
    """Play one episode with the env's oracle (or ``policy``) and return its record.

    Oracles read the env's internal state (the task and its answer), so on
    ``agentgym/Remote-v0``, whose state stays on the server, only a ``policy`` of your own runs."""
    inner = env.unwrapped
    if policy is None and not hasattr(inner, "task"):
        raise ConfigError(
            f"run_oracle: {type(inner).__name__} has no task to read: an oracle reads the env's internal "
            "state (the task's answer), which a remote env keeps on its server. Run the oracle where the "
            f"env lives (run_oracle(gym.make({inner.env_id!r})), or `agentgym demo` there), or pass policy=")
    policy = policy or get_oracle(inner.env_id)
    env.reset(seed=seed, options=options)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(policy(env))
        done = terminated or truncated
    traj: Trajectory = inner.trajectory
    return traj
