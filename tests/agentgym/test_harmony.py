from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym import ByteTokenizer, HarmonyCodec, Message

codec = HarmonyCodec(ByteTokenizer())
tok = codec.tok
text = st.text(max_size=200)
name = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)


@given(text)
def test_final_answer_round_trips(answer: str) -> None:
    p = codec.parse(codec.final_ids(answer))
    assert p.ok and p.final == answer and p.stop == "<|return|>" and p.tool_call is None


@given(name, st.dictionaries(name, st.one_of(st.integers(), text, st.booleans(), st.none()), max_size=5),
       st.one_of(st.none(), text))
def test_tool_call_round_trips(tool: str, args: dict, analysis: str | None) -> None:
    p = codec.parse(codec.tool_call_ids(tool, args, analysis=analysis))
    assert p.ok, p.errors
    assert p.tool_call is not None and p.tool_call.name == tool and p.tool_call.arguments == args
    assert p.stop == "<|call|>"
    if analysis is not None:
        assert p.messages[0].channel == "analysis" and p.messages[0].content == analysis


messages = st.lists(st.builds(
    Message,
    role=st.sampled_from(["system", "developer", "user", "assistant"]),
    content=text,
    channel=st.one_of(st.none(), st.sampled_from(["analysis", "commentary", "final"])),
), min_size=1, max_size=6)


@given(messages)
@settings(max_examples=200)
def test_message_sequences_round_trip(msgs: list[Message]) -> None:
    ids = codec.render_many(msgs)
    # parse() expects what follows "<|start|>ROLE": strip the first "<|start|>" and role.
    first = [codec.START, *tok.encode(msgs[0].role)]
    assert ids[: len(first)] == first
    p = codec.parse(ids[len(first):], role=msgs[0].role)
    assert [(m.role, m.content, m.channel) for m in p.messages] == [
        (m.role, m.content, m.channel) for m in msgs]


@given(st.lists(st.integers(0, tok.vocab_size - 1), max_size=300))
def test_parse_is_total_on_arbitrary_ids(ids: list[int]) -> None:
    p = codec.parse(ids)  # never raises
    assert p.ok or p.errors


def _ids(s: str) -> list[int]:
    from agentgym.tokenizers import encode_harmony_text
    return encode_harmony_text(tok, s)


def test_malformed_outputs_give_structured_errors() -> None:
    cases = {
        "<|channel|>final<|message|>42": "no_stop",  # missing <|return|>
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": <|call|>': "bad_json",
        "<|channel|>commentary to=browser.open<|message|>{}<|call|>": "unknown_recipient",
        "<|channel|>final<|message|>42<|return|>junk": "text_after_stop",
        "<|channel|>analysis<|message|>thinking<|end|>": "no_stop",
        '<|channel|>commentary to=functions.f<|message|>[1, 2]<|call|>': "bad_json",
        "": "empty",
    }
    for s, code in cases.items():
        p = codec.parse(_ids(s))
        assert code in [e.code for e in p.errors], (s, p.errors)


def test_text_after_stop_keeps_the_answer() -> None:
    p = codec.parse(_ids("<|channel|>final<|message|>42<|return|><|start|>assistant"))
    assert p.final == "42"


def test_recipient_in_role_header_is_understood() -> None:
    p = codec.parse(_ids(' to=functions.add<|channel|>commentary json<|message|>{"x": 1}<|call|>'))
    assert p.ok and p.tool_call is not None and p.tool_call.name == "add"


def test_tool_result_and_signatures_render_in_harmony() -> None:
    assert tok.decode(codec.render_tool_result("add", json.dumps(3))) == (
        "<|start|>functions.add to=assistant<|channel|>commentary<|message|>3<|end|><|start|>assistant")


def test_parse_after_a_bare_start_reads_the_role_from_the_header() -> None:
    """``role=""``: the ids follow ``<|start|>`` alone (an observation), so the header names the role."""
    ids = codec.render_tool_result("get_order", "HTTP 200 {}")
    assert ids[0] == codec.START
    msg = codec.parse(ids[1:], role="").messages[0]
    assert (msg.role, msg.recipient, msg.channel, msg.content) == (
        "functions.get_order", "assistant", "commentary", "HTTP 200 {}")
