"""Demonstrations: an env's declared teacher (its oracle, or a teacher built on it) played through the env.

:func:`find_oracle` resolves an env's oracle from its declared capabilities (the run builds a
teacher on it: ``sft.make_teacher``); :func:`demonstrations` plays a policy once per seed. The
warm start and the imitation baselines train on these trajectories.
"""

from __future__ import annotations

from typing import Any

from agentgym.errors import ConfigError
from agentgym.oracles import StepPolicy, get_oracle, play_episode
from agentgym.registration import capabilities, ids_with
from agentgym.trajectory import Trajectory

__all__ = ["demonstrations", "find_oracle"]


def find_oracle(env_id: str) -> StepPolicy:
    """The oracle of an env that declares warm-start teachers (the demonstrations' source)."""
    if not capabilities(env_id).teachers:
        raise ConfigError(f"no oracle policy known for {env_id!r}: warm start (sft.steps > 0) needs an env "
                          f"that declares teachers, one of {ids_with('teachers')}; declare yours with "
                          "agentgym.register(..., capabilities=agentgym.Capabilities(oracle=..., teachers=...)) "
                          "or set sft.steps=0")
    return get_oracle(env_id)


def demonstrations(env: Any, oracle: StepPolicy, seeds: list[int],
                   options: dict[str, Any] | None = None, held: Any = None) -> list[Trajectory]:
    """Run a teacher (e.g. the oracle) through ``env`` once per seed; the trajectories are the
    demonstrations. ``held`` (a :class:`~agentgym.trainer.rollout.heldout.HeldOut`): replace the seeds
    whose problems are held out (when it excludes them)."""
    out = []
    for seed in seeds:
        if held is not None and held.exclude:
            seed = held.replace(seed, options)
        out.append(play_episode(env, oracle, seed=seed, options=options))
    return out


