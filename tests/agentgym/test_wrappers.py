"""TextWrapper: Harmony text over the token API, forgiving what API models write."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym import ActionTypeError, TextWrapper
from agentgym.wrappers import HarmonyText
from tests.agentgym.toy import EchoEnv

# check_env warns that a wrapper is not the unwrapped env: checking the wrapper is the point here
pytestmark = pytest.mark.filterwarnings("ignore:.*different from the unwrapped")


def _word(env: TextWrapper) -> str:
    return str(env.unwrapped.task.prompt.split()[-1])


def _call(env: TextWrapper, word: str) -> str:
    """The echo call as Harmony text, without its stop token (the codec's own rendering)."""
    text = env.tokenizer.decode(env.codec.tool_call_ids("echo", {"word": word}))
    assert text.endswith("<|call|>")
    return text[: -len("<|call|>")]


@pytest.mark.parametrize("make", [EchoEnv, lambda: gym.make("agentgym/MathCalc-v1"),
                                  lambda: gym.make("agentgym/Math-v1")])
def test_check_env_passes(make) -> None:
    check_env(TextWrapper(make()), skip_render_check=True)


def test_text_space_holds_every_observation_and_action() -> None:
    space = HarmonyText()
    env = TextWrapper(gym.make("agentgym/MathCalc-v1"))
    obs, _ = env.reset(seed=0)
    assert obs in space and "<|start|>" in obs and "\n" in obs
    for text in ["", "ünïcødé ✓ 中文", "<|channel|>final<|message|>42<|return|>", "\x00\t"]:
        assert text in space
    assert 42 not in space and b"x" not in space
    space.seed(0)
    samples = [space.sample() for _ in range(50)]
    assert all(s in space and 1 <= len(s) <= 64 for s in samples)


def test_well_formed_harmony_is_untouched() -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    w = _word(env)
    obs, r, term, _, info = env.step(_call(env, w) + "<|call|>")
    assert info["repairs"] == [] and info["error"] is None and w.upper() in obs and not term
    _, r, term, _, info = env.step(f"<|channel|>final<|message|>{w.upper()}<|return|>")
    assert term and r == 1.0 and info["repairs"] == [] and info["repair_counts"] == {}


def test_leading_start_assistant_is_dropped_not_an_error_cascade() -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    w = _word(env)
    obs, _, term, _, info = env.step("<|start|>assistant" + _call(env, w) + "<|call|>")
    assert info["error"] is None and info["repairs"] == ["leading_start"]
    assert info["tool_result"]["ok"] and w.upper() in obs and not term
    # the record holds the action as repaired: exactly what a Harmony model samples
    inner = env.unwrapped
    t = inner.trajectory.turns[-1]
    assert inner.trajectory.tokens[t.action_start:t.action_end] == inner.codec.tool_call_ids("echo", {"word": w})


def test_plain_text_is_read_as_a_final_answer_and_counted() -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    w = _word(env)
    _, r, term, trunc, info = env.step(w.upper())
    assert term and not trunc and r == 1.0
    assert info["repairs"] == ["plain_text"] and info["repair_counts"] == {"plain_text": 1}
    assert info["error"] is None
    env.reset(seed=2)
    _, r, term, _, info = env.step("I don't know")
    assert term and r == 0.0 and info["repair_counts"] == {"plain_text": 1}  # counts are per episode


@pytest.mark.parametrize("action, repairs", [
    ("<|channel|>final<|message|>{W}", ["missing_stop"]),
    ("<|channel|>final<|message|>{W}<|end|>", ["end_as_stop"]),
    ("<|channel|>final<|message|>{W}<|return|>\n", ["trailing_whitespace"]),
    ("<|start|>assistant<|channel|>final<|message|>{W}", ["leading_start", "missing_stop"]),
    ("<|channel|>analysis<|message|>easy<|end|><|start|>assistant<|channel|>final<|message|>{W}",
     ["missing_stop"]),
])
def test_missing_or_wrong_stop_tokens_are_repaired(action: str, repairs: list[str]) -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    _, r, term, _, info = env.step(action.replace("{W}", _word(env).upper()))
    assert term and r == 1.0 and info["repairs"] == repairs and info["error"] is None


def test_tool_call_without_stop_is_repaired_and_runs() -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    w = _word(env)
    for suffix, repair in (("", "missing_stop"), ("<|end|>", "end_as_stop")):
        obs, _, term, _, info = env.step(_call(env, w) + suffix)
        assert info["repairs"] == [repair] and info["tool_result"]["ok"] and not term
        assert obs.startswith("<|start|>functions.echo to=assistant")


def test_unrepairable_text_gives_one_clear_error() -> None:
    env = TextWrapper(EchoEnv())
    env.reset(seed=2)
    obs, r, term, _, info = env.step("<|channel|>analysis<|message|>thinking...")
    assert not term and info["repairs"] == []
    assert info["error"].count("no_stop") == 1 and ";" not in info["error"]
    assert "[agentgym]" in obs and obs.endswith("<|start|>assistant")


@pytest.mark.parametrize(("action", "hint"), [(12345, "got int$"), ({"content": "x"}, "ChatWrapper"),
                                              (np.array([1, 2]), "unwrapped env"), (None, "got NoneType")])
def test_a_non_string_action_is_the_programs_mistake_and_raises(action, hint: str) -> None:
    env = TextWrapper(EchoEnv(reward_mode="shaped"))
    env.reset(seed=2)
    with pytest.raises(ActionTypeError, match=hint):
        env.step(action)  # type: ignore[arg-type]
    assert env.unwrapped.trajectory.turns == []  # no turn used
    _, r, term, _, info = env.step(f"<|channel|>final<|message|>{_word(env).upper()}<|return|>".encode())
    assert term and info["error"] is None


def test_replay_of_repaired_episode_gives_the_same_rewards() -> None:
    env = TextWrapper(EchoEnv(reward_mode="shaped"))
    env.reset(seed=3)
    w = _word(env)
    env.step("<|start|>assistant" + _call(env, w))
    env.step(w.upper())
    traj = env.unwrapped.trajectory
    replay = EchoEnv(reward_mode="shaped")
    obs, _ = replay.reset(seed=3)
    tokens = list(obs)
    for turn, action in zip(traj.turns, traj.actions()):
        obs, r, *_ = replay.step(np.array(action))
        tokens += action + obs.tolist()
        assert r == turn.reward
    assert tokens == traj.tokens


def test_exported() -> None:
    assert agentgym.TextWrapper is TextWrapper
