"""Every built-in environment declares a scripted oracle that solves it (agentgym.oracles).

The imported envs (ReasoningGym-v0, Verifiers-v0, ...) need a source to play; their oracles are
tested with one in tests/environments/interop."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym
from agentgym.oracles import run_oracle
from agentgym.registration import capabilities, ids_with


def test_every_registered_env_has_an_oracle() -> None:
    assert set(agentgym.registered_ids()) <= set(ids_with("oracle"))


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.docker) if capabilities(i).sandbox else i
                                    for i in agentgym.registered_ids()])
def test_oracle_solves_the_env(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        for seed in (0, 1):
            traj = run_oracle(env, seed=seed)
            assert traj.terminated and traj.total_reward == 1.0, (env_id, seed, traj.turns)
            assert traj.num_policy_tokens > 0 and len(traj.tokens) == traj.turns[-1].obs_end
    finally:
        env.close()
