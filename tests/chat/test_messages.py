"""The one mapping between OpenAI-style chat messages and Harmony tokens."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the ids)
from agentgym.chat.messages import (
    action_ids,
    assistant_message,
    assistant_turn,
    observation_messages,
    tool_schemas,
    tool_specs,
)
from agentgym.harmony import HarmonyCodec, Message
from agentgym.serving.chat_server import render_conversation
from agentgym.tokenizers import ByteTokenizer

CODEC = HarmonyCodec(ByteTokenizer())
names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
texts = st.text(max_size=40)


@st.composite
def assistant_messages(draw: st.DrawFn) -> dict:
    msg: dict = {"role": "assistant", "content": draw(st.one_of(st.none(), texts))}
    if draw(st.booleans()):
        msg["reasoning_content"] = draw(texts.filter(bool))
    if draw(st.booleans()):
        args = draw(st.one_of(texts, st.dictionaries(names, st.integers()).map(json.dumps)))
        msg["tool_calls"] = [{"id": "call_1", "type": "function",
                              "function": {"name": draw(names), "arguments": args}}]
    return msg


@settings(max_examples=200, deadline=None)
@given(assistant_messages())
def test_assistant_message_round_trips_through_harmony(msg: dict) -> None:
    ids = action_ids(CODEC, assistant_turn(msg))
    parsed = CODEC.parse(ids)
    # bad arguments are the env's to judge; a message that only thought has no stop token
    assert {e.code for e in parsed.errors} <= {"bad_json", "no_stop"}
    back = assistant_message(parsed, CODEC.tok.decode(ids), "call_1")
    # the same tokens again: nothing the message says is lost or invented
    assert action_ids(CODEC, assistant_turn(back)) == ids
    if "tool_calls" in msg:
        assert back["tool_calls"] == msg["tool_calls"] and parsed.stop == "<|call|>"
        assert back["content"] == (msg["content"] or None)
    elif msg["content"] is None and msg.get("reasoning_content"):  # thought, said nothing: no stop
        assert back["content"] is None and parsed.stop is None
    else:
        assert back["content"] == (msg["content"] or "") and parsed.stop == "<|return|>"
    assert back.get("reasoning_content") == msg.get("reasoning_content")


def test_actions_are_what_the_codec_would_sample() -> None:
    call = {"role": "assistant", "content": None, "reasoning_content": "add them",
            "tool_calls": [{"id": "c", "type": "function",
                            "function": {"name": "calculator", "arguments": '{"expression": "1 + 2"}'}}]}
    assert action_ids(CODEC, assistant_turn(call)) == CODEC.tool_call_ids(
        "calculator", {"expression": "1 + 2"}, analysis="add them")
    assert action_ids(CODEC, assistant_turn({"role": "assistant", "content": "3"})) == CODEC.final_ids("3")
    assert action_ids(CODEC, assistant_turn("3")) == CODEC.final_ids("3")  # a bare string is the content


def test_preamble_beside_a_tool_call_goes_to_the_commentary_channel() -> None:
    msg = {"role": "assistant", "content": "Let me look.",
           "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}
    parsed = CODEC.parse(action_ids(CODEC, assistant_turn(msg)))
    pre, call = parsed.messages
    assert (pre.channel, pre.recipient, pre.content, pre.end) == ("commentary", None, "Let me look.", "<|end|>")
    assert (call.channel, call.recipient, call.constrain, call.end) == ("commentary", "functions.f", "json", "<|call|>")
    assert parsed.ok and parsed.tool_call is not None and parsed.tool_call.arguments == {}


def test_hostile_messages_are_read_never_raised() -> None:
    for bad in [None, 42, [], {"role": "user", "content": 7}, {"tool_calls": "x"},
                {"tool_calls": [None, {"function": {"name": 3, "arguments": {"a": 1}}}]},
                {"content": [{"type": "text", "text": "a"}, {"type": "image_url"}, "b"]}]:
        turn = assistant_turn(bad)
        ids = action_ids(CODEC, turn)
        assert CODEC.parse(ids).stop in ("<|call|>", "<|return|>")
    turn = assistant_turn({"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]})
    assert turn.call is not None and turn.call["function"]["arguments"] == '{"a": 1}' and turn.notes
    assert assistant_turn({"content": [{"type": "text", "text": "a"}, "b"]}).content == "ab"


def test_parallel_calls_keep_the_first_and_list_the_rest() -> None:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": f"f{i}", "arguments": "{}"}} for i in range(3)]
    turn = assistant_turn({"role": "assistant", "content": None, "tool_calls": calls})
    assert turn.call == calls[0] and turn.dropped == calls[1:]


def test_unparsed_output_shows_what_was_written() -> None:
    text = "garbage without any header"
    ids = CODEC.tok.encode(text)
    msg = assistant_message(CODEC.parse(ids), text, "c")
    assert msg == {"role": "assistant", "content": text}


def test_tool_schemas_come_from_the_same_tools_as_the_developer_message() -> None:
    env = gym.make("agentgym/MathCalc-v1")
    obs, _ = env.reset(seed=0)
    tools = env.unwrapped.episode_tools
    schemas = tool_schemas(tools)
    assert schemas == [{"type": "function", "function": t.schema} for t in tools]
    dev = env.unwrapped.tokenizer.decode(obs.tolist())
    for t in tools:
        assert f"type {t.name} = " in dev and t.description in dev
    assert [s.name for s in tool_specs(schemas)] == [t.name for t in tools]
    schemas[0]["function"]["parameters"]["properties"].clear()  # a copy: the env's tool is untouched
    assert tools[0].parameters["properties"]
    with pytest.raises(ValueError, match="tools\\[0\\]"):
        tool_specs([{"type": "function", "function": {"description": "no name"}}])


def test_observations_become_tool_and_user_messages() -> None:
    result = CODEC.render_tool_result("calculator", "85")
    assert observation_messages(CODEC, result, "call_7") == [
        {"role": "tool", "tool_call_id": "call_7", "content": "85"}]
    notice = CODEC.render_prompt([Message("user", "[agentgym] bad\nReply with a tool call or a final answer.")])
    assert observation_messages(CODEC, [CODEC.END, *notice], None) == [
        {"role": "user", "content": "[agentgym] bad\nReply with a tool call or a final answer."}]
    assert observation_messages(CODEC, [], None) == []
    with pytest.raises(ValueError):
        observation_messages(CODEC, CODEC.tok.encode("not harmony"), None)


def test_conversation_rendering_rules() -> None:
    specs = tool_specs([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}])
    convo = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "hello"}, {"role": "system", "content": "later rule"},
             {"role": "user", "content": "call f"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "x", "content": "ok"}]
    text = CODEC.tok.decode(render_conversation(CODEC, convo, specs, "high"))
    assert "Reasoning: high" in text and "# Instructions\n\nBe brief." in text and "type f = " in text
    # an earlier answer closes with <|end|>, a later system message is a developer message
    assert "<|channel|>final<|message|>hello<|end|><|start|>developer<|message|>later rule<|end|>" in text
    assert text.endswith("<|start|>functions.f to=assistant<|channel|>commentary<|message|>ok<|end|>"
                         "<|start|>assistant")
    bare = CODEC.tok.decode(render_conversation(CODEC, [{"role": "user", "content": "hi"}], [], "low"))
    assert "<|start|>developer" not in bare and bare.startswith("<|start|>system")
    with pytest.raises(ValueError, match="tool_call_id 'nope'"):
        render_conversation(CODEC, [{"role": "tool", "tool_call_id": "nope", "content": "x"}], [], "low")
    with pytest.raises(ValueError, match="role"):
        render_conversation(CODEC, [{"role": "wizard", "content": "x"}], [], "low")
