"""ChatWrapper: every environment as OpenAI-style messages and tool calls, on the token API."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym import ChatWrapper
from agentgym.chat.messages import assistant_message, tool_specs
from agentgym.errors import ConfigError, EnvStateError
from agentgym.oracles import get_oracle, run_oracle
from agentgym.serving.chat_server import render_conversation
from agentgym.trajectory import Trajectory
from tests.agentgym.toy import EchoEnv
from tests.chat.conftest import ENV_IDS

# check_env warns that a wrapper is not the unwrapped env: checking the wrapper is the point here
pytestmark = pytest.mark.filterwarnings("ignore:.*different from the unwrapped")

def replay(env: gym.Env, traj: Trajectory) -> tuple[list[int], list[float]]:
    """Feed the recorded actions to a fresh token env: its tokens and per-turn rewards."""
    obs, _ = env.reset(seed=traj.seed, options=traj.meta["options"])
    tokens, rewards = obs.tolist(), []
    for action in traj.actions():
        obs, r, *_ = env.step(np.array(action))
        tokens += action + obs.tolist()
        rewards.append(r)
    return tokens, rewards


def oracle_message(env: gym.Env) -> dict[str, Any]:
    """The oracle's next action as the assistant message a chat model would send."""
    inner = env.unwrapped
    ids = list(get_oracle(inner.env_id)(env))
    return assistant_message(inner.codec.parse(ids), inner.tokenizer.decode(ids), "call_oracle")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id: str, make) -> None:
    check_env(ChatWrapper(make(env_id)), skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_through_chat_is_the_token_episode(env_id: str, make) -> None:
    """Chat messages in, the same tokens, rewards and ending as the token API, and the
    conversation renders back to the env's exact token stream at every turn."""
    for seed in (0, 1):
        ref = run_oracle(make(env_id), seed=seed)
        env = make(env_id, reward_mode="shaped")
        chat = ChatWrapper(env)
        messages, info = chat.reset(seed=seed)
        inner = env.unwrapped
        assert messages[0] == {"role": "system", "content": inner.instructions}
        assert messages[1]["role"] == "user" and info["tools"] == chat.tools
        specs, kinds, done = tool_specs(info["tools"]), [], False
        while not done:
            assert render_conversation(inner.codec, chat.messages, specs, info["reasoning_effort"]) \
                == inner.trajectory.tokens
            new, reward, terminated, truncated, step_info = chat.step(oracle_message(env))
            assert new in chat.observation_space and step_info["error"] is None
            kinds += [m["role"] for m in new]
            done = terminated or truncated
        traj = inner.trajectory
        assert traj.tokens == ref.tokens and traj.terminated and not traj.truncated
        assert traj.total_reward > 0.9  # solved (shaped: outcome plus small terms)
        tokens, rewards = replay(make(env_id, reward_mode="shaped"), traj)
        assert tokens == traj.tokens and rewards == [t.reward for t in traj.turns]
        assert kinds == ["tool"] * (len(traj.turns) - 1)  # every turn but the answer was a tool call


def test_malformed_messages_get_the_token_envs_penalties_and_never_raise() -> None:
    chat = ChatWrapper(EchoEnv(reward_mode="shaped", max_turns=20))
    chat.reset(seed=2)
    cases: list[Any] = [
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "nope", "arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"id": "b", "function": {"name": "echo", "arguments": "{bad"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "echo", "arguments": '{"x": 1}'}}]},
        {"role": "assistant", "tool_calls": [{"function": {"name": "echo", "arguments": {"word": "hi"}}}]},
    ]
    for msg in cases:
        new, reward, term, trunc, info = chat.step(msg)
        assert not term and not trunc and len(new) == 1 and new[0]["role"] == "tool"
        assert new[0]["tool_call_id"] == chat.messages[-2]["tool_calls"][0]["id"]
    errors = [t.error for t in chat.inner.trajectory.turns]
    assert "unknown_tool" in chat.messages[2 + 1]["content"] and errors[1] and "bad_json" in errors[1]
    assert chat.inner.counts["malformed"] == 3 and chat.inner.counts["tool_calls"] == 2
    assert chat.messages[-2]["tool_calls"][0]["id"] == "call_3"  # ids assigned deterministically
    assert info["message_notes"] and chat.messages[-1]["content"] == "HI"


def test_parallel_tool_calls_run_the_first_and_report_the_rest() -> None:
    chat = ChatWrapper(EchoEnv())
    chat.reset(seed=2)
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "echo", "arguments": f'{{"word": "w{i}"}}'}}
             for i in range(3)]
    new, _, _, _, info = chat.step({"role": "assistant", "content": None, "tool_calls": calls})
    assert new == [{"role": "tool", "tool_call_id": "c0", "content": "W0"}]
    assert info["dropped_tool_calls"] == calls[1:]
    assert chat.messages[-2]["tool_calls"] == calls[:1]  # the conversation agrees with the tokens


def test_reasoning_and_preamble_are_in_the_token_stream() -> None:
    class Msg:  # what the openai SDK returns: a pydantic object with model_dump()
        def model_dump(self) -> dict[str, Any]:
            return {"role": "assistant", "content": "Checking.", "reasoning_content": "use echo",
                    "tool_calls": [{"id": "z", "type": "function",
                                    "function": {"name": "echo", "arguments": '{"word": "a"}'}}]}

    chat = ChatWrapper(EchoEnv())
    chat.reset(seed=2)
    chat.step(Msg())
    t = chat.inner.trajectory
    text = chat.inner.tokenizer.decode(t.tokens[t.turns[0].action_start:t.turns[0].action_end])
    assert text.startswith("<|channel|>analysis<|message|>use echo<|end|><|start|>assistant"
                           "<|channel|>commentary<|message|>Checking.<|end|>")
    assert chat.messages[-2]["reasoning_content"] == "use echo"


def test_reasoning_without_an_answer_gets_the_envs_notice() -> None:
    """A message that only thought (a reasoning model cut off by max_tokens) is the analysis
    action: the env asks for a tool call or an answer and the episode goes on, as in Harmony."""
    chat = ChatWrapper(EchoEnv(reward_mode="shaped"))
    _, info = chat.reset(seed=2)
    new, reward, term, trunc, _ = chat.step({"role": "assistant", "content": None, "reasoning_content": "hmm"})
    # malformed: counted, penalised on a correct outcome only (issue 10's reward invariant)
    assert not term and not trunc and reward == 0.0 and len(new) == 1 and new[0]["role"] == "user"
    assert new[0]["content"].startswith("[agentgym]") and chat.inner.counts["malformed"] == 1
    specs = tool_specs(info["tools"])
    assert render_conversation(chat.codec, chat.messages, specs, "low") == chat.inner.trajectory.tokens
    _, reward, term, _, _ = chat.step({"role": "assistant", "content": ""})  # empty content: an empty answer
    assert term and chat.inner.trajectory.turns[-1].components["outcome"] == 0.0


def test_truncation_and_misuse() -> None:
    chat = ChatWrapper(EchoEnv(max_turns=1))
    with pytest.raises(EnvStateError):
        chat.step("x")
    chat.reset(seed=0)
    new, _, term, trunc, _ = chat.step({"role": "assistant", "tool_calls": [
        {"id": "a", "function": {"name": "echo", "arguments": '{"word": "x"}'}}]})
    assert trunc and not term and new == []
    with pytest.raises(ConfigError, match="ToolEnv"):
        ChatWrapper(gym.make("CartPole-v1"))


def test_a_list_of_messages_is_the_programs_mistake_and_a_missing_role_gets_a_note() -> None:
    from agentgym.errors import ActionTypeError

    chat = ChatWrapper(EchoEnv())
    chat.reset(seed=2)
    msg = {"role": "assistant", "content": "x"}
    with pytest.raises(ActionTypeError, match=r"one assistant message.*step\(messages\[-1\]\) \(got a list of 1\)"):
        chat.step([msg])
    with pytest.raises(ActionTypeError, match="got NoneType"):
        chat.step(None)
    assert chat.inner.trajectory.turns == []  # nothing used up
    _, _, term, _, info = chat.step({"content": "x"})
    assert term and info["message_notes"] == ["the message has no role; read as 'assistant'"]
