"""agentgym/SkyRL-v0 with SkyRL-gym's real gsm8k envs."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.errors import ConfigError
from agentgym.oracles import run_oracle

pytest.importorskip("skyrl_gym", reason="pip install 'agentgym-suite[interop]'")

SKY = "agentgym/SkyRL-v0"
ROWS = [{"prompt": [{"role": "system", "content": "Think, then answer."},
                    {"role": "user", "content": f"What is {i} + {i}? End with '#### ANSWER'."}],
         "reward_spec": {"ground_truth": str(2 * i)}, "extra_info": {"max_turns": 3}} for i in range(6)]


@pytest.mark.parametrize("env_class", ["gsm8k", "gsm8k_multi_turn"])
def test_check_env_and_oracle(env_class: str) -> None:
    env = gym.make(SKY, env_class=env_class, tasks=ROWS)
    check_env(env.unwrapped, skip_render_check=True)
    assert all(run_oracle(env, seed=s).total_reward == 1.0 for s in range(4))
    assert env.unwrapped.provenance().replayable


def test_multi_turn_observations_come_back_as_the_users_reply() -> None:
    env = gym.make(SKY, env_class="gsm8k_multi_turn", tasks=ROWS, reward_mode="shaped")
    u = env.unwrapped
    env.reset(seed=0, options={"index": 2})
    obs, r, term, trunc, info = env.step(u.codec.final_ids("I think #### 5"))
    assert not term and not trunc
    text = u.tokenizer.decode(obs)
    assert text.startswith("<|start|>user<|message|>Please provide your step-by-step reasoning")
    assert info["reward_components"]["step_reward"] == pytest.approx(0.2 / 3)  # SkyRL's format score
    *_, r, term, _, _ = env.step(u.codec.final_ids("#### 4"))
    assert term and r >= 1.0


def test_split_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="one file per split"):
        gym.make(SKY, env_class="gsm8k", tasks=ROWS, split="eval")
