"""Scripted policies: each environment's oracle, as it declared it at registration.

An oracle is a function ``env -> next action tokens`` that reads the episode's state (the
task, earlier tool results) and returns exactly what a perfect policy would sample. They
drive tests, benchmarks, the ``agentgym demo`` command and the trainer's warm-start
demonstrations. An environment names its own (``Capabilities(oracle="module:function")`` in
:func:`agentgym.register`); :func:`agentgym.registration.ids_with` lists the ids that have one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from agentgym.errors import ConfigError
from agentgym.registration import capabilities, ids_with
from agentgym.trajectory import Trajectory

__all__ = ["StepPolicy", "get_oracle", "load_callable", "play_episode", "run_oracle"]

StepPolicy = Callable[[Any], np.ndarray]  # env -> the next action's token ids (an oracle, a teacher)


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


def get_oracle(env_id: str) -> StepPolicy:
    """The oracle ``env_id`` declared at registration."""
    spec = capabilities(env_id).oracle
    if spec is None:
        raise ConfigError(f"no oracle for {env_id!r}; known: {ids_with('oracle')}")
    return load_callable(spec)


def play_episode(env: Any, policy: StepPolicy, *, seed: int | None = None,
                 options: dict[str, Any] | None = None) -> Trajectory:
    """Reset ``env`` and step it with ``policy(env)`` until the episode ends; its record (the
    env's own trajectory object: copy it before the next reset if you keep it)."""
    env.reset(seed=seed, options=options)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(policy(env))
        done = terminated or truncated
    traj: Trajectory = env.unwrapped.trajectory
    return traj


def run_oracle(env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None,
               policy: StepPolicy | None = None) -> Trajectory:
    """Play one episode with the env's oracle (or ``policy``) and return its record.

    Oracles read the env's internal state (the task and its answer), so on
    ``agentgym/Remote-v0``, whose state stays on the server, only a ``policy`` of your own runs."""
    inner = env.unwrapped
    if policy is None and not hasattr(inner, "task"):
        raise ConfigError(
            f"run_oracle: {type(inner).__name__} has no task to read: an oracle reads the env's internal "
            "state (the task's answer), which a remote env keeps on its server. Run the oracle where the "
            f"env lives (run_oracle(gym.make({inner.env_id!r})), or `agentgym demo` there), or pass policy=")
    return play_episode(env, policy or get_oracle(inner.env_id), seed=seed, options=options)
