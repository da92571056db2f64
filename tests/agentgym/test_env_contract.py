"""ToolEnv's contract under hostile or buggy input: each test here failed before its fix.

* the prompt prefix cache is keyed on everything the prefix renders, not on tool names;
* a tool returning something other than ``str``/``ToolResult`` does not raise out of ``step``;
* ``step`` is exception-safe: an env bug raises with no trace of the turn in the record;
* a tool call with Harmony parse errors runs but is counted and penalised as malformed;
* ``score_final`` returning ``terminal=False`` is a clear programmer error, not a silent turn.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from agentgym import ConfigError, Tool, ToolResult
from agentgym.env import _State
from agentgym.tokenizers import encode_harmony_text

from .toy import EchoEnv


class DescribedEnv(EchoEnv):
    """The tool's description names the episode's word: it depends on the task."""

    def tools(self) -> list[Tool]:
        assert self.task is not None
        word = self.task.prompt.split()[-1]
        return [Tool("echo", f"Returns {word!r} in upper case.",
                     {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
                     lambda word: word.upper())]


def test_prompt_prefix_cache_is_keyed_on_the_rendered_tools() -> None:
    for style in ("harmony", "compact"):
        env = DescribedEnv(prompt=style)
        seen = {}
        for seed in range(12):
            obs, _ = env.reset(seed=seed)
            word = env.task.prompt.split()[-1]
            seen[word] = env.tokenizer.decode(obs.tolist())
        assert len(seen) >= 2
        if style == "harmony":  # the compact style lists signatures only, no descriptions
            for word, text in seen.items():
                assert f"Returns {word!r} in upper case" in text, (style, word)
                others = [w for w in seen if w != word]
                assert not any(f"Returns {w!r}" in text for w in others), (style, word)


def test_prompt_prefix_cache_sees_instructions_changed_per_episode() -> None:
    class Moody(EchoEnv):
        def on_reset(self) -> None:
            assert self.task is not None
            self.instructions = f"Today's word is secret ({self.task.id})."  # type: ignore[misc]

    env = Moody()
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        assert f"({env.task.id})" in env.tokenizer.decode(obs.tolist())


@pytest.mark.parametrize("value, expected", [
    ({"word": "APPLE"}, '{"word": "APPLE"}'), (42, "42"), (None, "null"), ([1, 2], "[1, 2]"), (1.5, "1.5"),
])
def test_tool_returning_json_values_is_rendered_not_raised(value: Any, expected: str) -> None:
    tool = Tool("t", "returns a value", {"type": "object"}, lambda: value)
    result = tool({})
    assert result.ok and result.content == expected


def test_tool_returning_an_unrenderable_object_is_a_readable_failure() -> None:
    tool = Tool("t", "returns an object", {"type": "object"}, lambda: object())
    result = tool({})
    assert not result.ok and result.error == "bad_tool_result" and "str or ToolResult" in result.content


def test_tool_returning_a_dict_does_not_raise_out_of_step() -> None:
    class DictTool(EchoEnv):
        def tools(self) -> list[Tool]:
            return [Tool("echo", "d", {"type": "object", "properties": {"word": {"type": "string"}}},
                         lambda word: {"upper": word.upper()})]

    env = DictTool()
    env.reset(seed=0)
    obs, _, term, trunc, info = env.step(np.array(env.codec.tool_call_ids("echo", {"word": "a"})))
    assert not term and not trunc and '{"upper": "A"}' in env.tokenizer.decode(obs.tolist())


def _record(env: EchoEnv) -> tuple[Any, ...]:
    t = env.trajectory
    return (list(t.tokens), list(t.policy_mask), list(t.logprobs), copy.deepcopy(t.turns),
            t.terminated, t.truncated, dict(env.counts))


def test_an_undeclared_reward_component_leaves_no_half_turn() -> None:
    class Leaky(EchoEnv):
        def score_final(self, answer: str) -> ToolResult:
            return ToolResult("", terminal=True, outcome=1.0, components={"bonus": 1.0})

    env = Leaky()
    env.reset(seed=0)
    env.step(np.array(env.codec.tool_call_ids("echo", {"word": "a"})))
    before = _record(env)
    with pytest.raises(ConfigError, match="extra_shaping"):
        env.step(np.array(env.codec.final_ids("x")))
    assert _record(env) == before  # no tokens, no turn, no counts from the failed step
    assert env._state is _State.RUNNING  # the episode can go on (the next tool call works)
    _, _, term, _, _ = env.step(np.array(env.codec.tool_call_ids("echo", {"word": "b"})))
    assert not term and len(env.trajectory.turns) == 2


def test_an_exception_in_score_final_leaves_no_half_turn() -> None:
    class Broken(EchoEnv):
        def score_final(self, answer: str) -> ToolResult:
            raise RuntimeError("the grader crashed")

    env = Broken()
    env.reset(seed=0)
    before = _record(env)
    with pytest.raises(RuntimeError, match="grader crashed"):
        env.step(np.array(env.codec.final_ids("x")))
    assert _record(env) == before


def test_score_final_that_does_not_end_the_episode_is_a_programmer_error() -> None:
    class Endless(EchoEnv):
        def score_final(self, answer: str) -> ToolResult:
            return ToolResult("keep going")  # terminal=False: a bug in the env

    env = Endless()
    env.reset(seed=0)
    before = _record(env)
    with pytest.raises(ConfigError, match="terminal=True"):
        env.step(np.array(env.codec.final_ids("x")))
    assert _record(env) == before


@pytest.mark.parametrize("text, code", [
    # a tool call closed by <|return|> instead of <|call|>
    ('<|channel|>commentary to=functions.echo <|constrain|>json<|message|>{"word": "a"}<|return|>', "wrong_stop"),
    # text sampled after the stop token
    ('<|channel|>commentary to=functions.echo <|constrain|>json<|message|>{"word": "a"}<|call|>junk', "text_after_stop"),
])
def test_a_tool_call_with_parse_errors_costs_the_malformed_penalty(text: str, code: str) -> None:
    env = EchoEnv(reward_mode="shaped")
    env.reset(seed=0)
    _, _, term, _, info = env.step(np.array(encode_harmony_text(env.tokenizer, text)))
    assert not term and info["tool_result"]["ok"]  # lenient: the call still ran
    assert code in info["error"]
    assert info["reward_components"].get("malformed") == 1.0 and env.counts["malformed"] == 1


def test_rejected_actions_are_counted_as_malformed() -> None:
    env = EchoEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([10**9]))
    assert info["counts"]["malformed"] == 1 and info["reward_components"]["malformed"] == 1.0

