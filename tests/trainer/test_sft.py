"""Warm start: oracle demonstrations are real, rewarded trajectories; SFT learns only the
policy tokens."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import agentgym  # noqa: F401
from agentgym.errors import ConfigError
from agentgym.trainer.batch import make_batch
from agentgym.trainer.model import build_tiny_gptoss
from agentgym.trainer.sft import demonstrations, find_oracle, sft_step

PAD = 263


@pytest.mark.parametrize("env_id, turns", [("agentgym/Math-v0", 1), ("agentgym/MathCalc-v0", 2)])
def test_oracle_demonstrations_are_solved_episodes(env_id: str, turns: int) -> None:
    env = gym.make(env_id)
    demos = demonstrations(env, find_oracle(env_id), [0, 1, 2])
    for t in demos:
        assert t.terminated and t.total_reward == 1.0 and len(t.turns) == turns
        # the calculator call's result is environment text: not a policy token
        if turns == 2:
            obs = t.tokens[t.turns[0].action_end:t.turns[0].obs_end]
            assert sum(t.policy_mask[t.turns[0].action_end:t.turns[0].obs_end]) == 0 and obs


def test_sft_loss_ignores_environment_tokens_and_decreases() -> None:
    env = gym.make("agentgym/MathCalc-v0")
    demos = demonstrations(env, find_oracle("agentgym/MathCalc-v0"), list(range(8)))
    model = build_tiny_gptoss(264, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # changing a tool-result token changes no loss term it is the *target* of
    b = make_batch(demos[:2], [0, 1], pad_id=PAD)
    assert b.policy_mask[:, :b.lengths.min()].sum() < b.lengths.sum()
    first = sft_step(model, opt, demos, pad_id=PAD, max_grad_norm=1.0, device=torch.device("cpu"))
    for _ in range(6):
        last = sft_step(model, opt, demos, pad_id=PAD, max_grad_norm=1.0, device=torch.device("cpu"))
    assert last["loss"] < first["loss"] - 0.5
    assert 0 < last["demo_token_p"] <= 1


def test_unknown_env_has_no_oracle() -> None:
    with pytest.raises(ConfigError, match="no oracle"):
        find_oracle("agentgym/CodeFix-v0")
