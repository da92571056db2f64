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
    # SkyRL's format score is reported, never paid
    assert info["reward_components"]["format_score"] == pytest.approx(0.2 / 3)
    assert info["reward_components"]["step_reward"] == 0.0 and r == 0.0
    *_, r, term, _, _ = env.step(u.codec.final_ids("#### 4"))
    assert term and r >= 1.0


def test_split_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="one file per split"):
        gym.make(SKY, env_class="gsm8k", tasks=ROWS, split="eval")


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
def test_a_constant_in_the_answer_format_earns_nothing(mode: str) -> None:
    """gsm8k_multi_turn pays a format score to any '#### N': not an outcome, not a shaped term."""
    env = gym.make(SKY, env_class="gsm8k_multi_turn", tasks=ROWS, reward_mode=mode)
    u = env.unwrapped
    try:
        for i in range(1, 6):
            env.reset(seed=0, options={"index": i})
            total, done = 0.0, False
            while not done:
                *_, r, term, trunc, _ = env.step(u.codec.final_ids("#### 0"))
                total, done = total + float(r), term or trunc
            assert total == 0.0, (i, total)
    finally:
        env.close()


def test_the_guard_probes_the_formats_constant_unless_it_is_the_answer() -> None:
    env = gym.make(SKY, env_class="gsm8k", tasks=ROWS, no_attempt_guard=True)
    u = env.unwrapped
    env.reset(seed=0, options={"index": 0})  # its answer is 0: "#### 0" is the answer, not a probe
    assert "#### 0" not in u.no_attempt_probes() and "#### 1" in u.no_attempt_probes()
    assert env.step(u.codec.final_ids("#### 0"))[1] == 1.0
    env.reset(seed=0, options={"index": 3})
    assert "#### 0" in u.no_attempt_probes()
    assert env.step(u.codec.final_ids("#### 6"))[1] == 1.0
    env.close()


def test_code_in_an_answer_runs_nowhere_near_the_host(tmp_path) -> None:
    """SkyRL's env steps in a fresh child of the scorer worker: an env whose step evaluated its
    input would do it there (audit-hooked, as nobody when root), and the episode's env dies with it."""
    env = gym.make(SKY, env_class="gsm8k_multi_turn", tasks=ROWS)
    u = env.unwrapped
    target = tmp_path / "pwned"
    try:
        env.reset(seed=0, options={"index": 2})
        env.step(u.codec.final_ids(f"__import__('pathlib').Path({str(target)!r}).write_text('x') #### 1"))
        assert u._session_open and u._worker is not None
        before = u._worker.sessions
        *_, r, term, _, _ = env.step(u.codec.final_ids("#### 4"))
        assert term and r == 1.0 and not u._session_open and u._worker.sessions == before  # one child per episode
        assert not target.exists()
    finally:
        env.close()
