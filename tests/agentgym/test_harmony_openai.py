"""agentgym's Harmony codec against openai-harmony itself, with GPT-OSS's own tokenizer.

Every environment's reset prompt, every oracle action (the SFT demonstrations are oracle
episodes) and every observation must be token-for-token what openai-harmony renders for the
same conversation, and parsing must agree with openai-harmony's parser on GPT-OSS-style
completions. Marker ``harmony``: under CI a skip (openai-harmony missing) is a failure.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.harmony import HarmonyCodec, Message, ParsedAction
from agentgym.harmony_schema import render_tool_signatures
from agentgym.oracles import run_oracle

pytestmark = pytest.mark.harmony
NEEDS_DOCKER = {"agentgym/CodeFix-v1", "agentgym/MathTool-v1"}
ENV_IDS = [pytest.param(i, marks=pytest.mark.docker) if i in NEEDS_DOCKER else i
           for i in agentgym.registered_ids()]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def oh() -> Any:
    return pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")


@pytest.fixture(scope="module")
def enc(oh: Any) -> Any:
    from agentgym.harmony_tokenizer import harmony_encoding

    return harmony_encoding()


@pytest.fixture(scope="module")
def codec(enc: Any) -> HarmonyCodec:
    return HarmonyCodec(agentgym.as_tokenizer("o200k_harmony"))


def reference_prompt(oh: Any, env: Any) -> list[int]:
    """openai-harmony's render of the prompt ``env`` meant: system, developer + tools, user."""
    u = env.unwrapped
    tools = [oh.ToolDescription.new(t.name, t.description, t.parameters) for t in u.tools()]
    dev = oh.DeveloperContent.new().with_instructions(u.instructions)
    if tools:
        dev = dev.with_function_tools(tools)
    effort = {"low": oh.ReasoningEffort.LOW, "medium": oh.ReasoningEffort.MEDIUM,
              "high": oh.ReasoningEffort.HIGH}[u.reasoning_effort]
    conv = oh.Conversation.from_messages([
        oh.Message.from_role_and_content(oh.Role.SYSTEM, oh.SystemContent.new().with_reasoning_effort(effort)),
        oh.Message.from_role_and_content(oh.Role.DEVELOPER, dev),
        oh.Message.from_role_and_content(oh.Role.USER, u.task.prompt),
    ])
    from agentgym.harmony_tokenizer import harmony_encoding

    return list(harmony_encoding().render_conversation_for_completion(conv, oh.Role.ASSISTANT))


def as_tuples(messages: list[Any]) -> list[tuple[Any, ...]]:
    """openai-harmony messages -> (author, recipient, channel, content type w/o marker, text)."""
    out = []
    for m in messages:
        author = m.author.name if m.author.role.value == "tool" else m.author.role.value
        ctype = (m.content_type or "").removeprefix("<|constrain|>") or None
        out.append((author, m.recipient, m.channel, ctype, "".join(c.text for c in m.content)))
    return out


def our_tuples(parsed: ParsedAction) -> list[tuple[Any, ...]]:
    return [(m.role, m.recipient, m.channel, m.constrain, m.content) for m in parsed.messages]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_episodes_are_what_openai_harmony_renders(env_id: str, oh: Any, enc: Any) -> None:
    """Reset prompt, oracle actions and observations of whole episodes, token for token."""
    env = gym.make(env_id, tokenizer="o200k_harmony")
    try:
        for seed in (0, 1):
            traj = run_oracle(env, seed=seed)
            assert traj.tokens[: traj.prompt_len] == reference_prompt(oh, env)
            # Canonical form: openai-harmony parses the episode and renders it back.
            msgs = enc.parse_messages_from_completion_tokens(traj.tokens, None)
            config = oh.RenderConversationConfig(auto_drop_analysis=False)
            again = enc.render_conversation_for_training(oh.Conversation.from_messages(msgs), config)
            assert traj.tokens == list(again), env_id
            # ...and each action parses the same in both parsers.
            codec = env.unwrapped.codec
            for turn in traj.turns:
                action = traj.tokens[turn.action_start + 2: turn.action_end]  # after "<|start|>assistant"
                ref = enc.parse_messages_from_completion_tokens(action, oh.Role.ASSISTANT)
                assert our_tuples(codec.parse(action)) == as_tuples(ref)
    finally:
        env.close()


def test_compact_prompt_notices_and_cut_calls_render_like_openai_harmony(oh: Any, enc: Any,
                                                                         codec: HarmonyCodec) -> None:
    env = gym.make("agentgym/MathCalc-v1", tokenizer="o200k_harmony", prompt="compact")
    obs, _ = env.reset(seed=3)
    thinking = codec.final_ids("x", analysis="<|end|> is text here")  # analysis, then a final answer
    obs2, *_ = env.step(np.array(thinking[: thinking.index(codec.END) + 1]))  # only the analysis
    obs3, *_ = env.step(np.array(codec.tool_call_ids("calculator", {"expression": "1+1"})[:-1]))  # no <|call|>
    env.close()
    gen = len(codec.generation_prompt)  # every observation ends with "<|start|>assistant"

    def rerendered(ids: Any) -> list[int]:
        msgs = enc.parse_messages_from_completion_tokens([int(t) for t in ids[:-gen]], None)
        return list(enc.render_conversation_for_completion(oh.Conversation.from_messages(msgs), oh.Role.ASSISTANT))

    assert [m.author.role.value for m in enc.parse_messages_from_completion_tokens(list(obs[:-gen]), None)] == [
        "developer", "user"]
    assert list(obs) == rerendered(obs)
    assert list(obs2) == rerendered(obs2)  # the [agentgym] notice, from the user side
    # A cut-off action is closed with <|end|> by the env, then the tool's result follows.
    assert int(obs3[0]) == codec.END and list(obs3[1:]) == rerendered(obs3[1:])
    assert codec.tok.decode(obs3[1:]).startswith("<|start|>functions.calculator to=assistant<|channel|>")


# ----------------------------------------------------------------------------- tool schemas
leaf = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "number", "integer", "boolean", "null"])}),
    st.fixed_dictionaries({"type": st.just("string"), "enum": st.lists(st.sampled_from(["a", "b c", "x\"y"]),
                                                                          min_size=1, max_size=3)}),
    st.fixed_dictionaries({"type": st.just(["string", "integer", "null"])}),
    st.just({"type": "array"}),
    st.just({}),
)
words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
extras = st.fixed_dictionaries({}, optional={
    "description": words, "title": words, "default": st.one_of(st.integers(-(2**63), 2**63 - 1), words, st.booleans(), st.none()),
    "nullable": st.booleans(), "examples": st.lists(words, max_size=2)})


def _with_extras(schema: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda s, e: {**s, **e}, schema, extras)


schemas = st.recursive(
    _with_extras(leaf),
    lambda inner: st.one_of(
        _with_extras(st.builds(lambda p, r: {"type": "object", "properties": p,
                                             "required": [k for k in p if r]},
                               st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner, max_size=4),
                               st.booleans())),
        _with_extras(st.builds(lambda i: {"type": "array", "items": i}, inner)),
        _with_extras(st.builds(lambda v: {"oneOf": v}, st.lists(inner, min_size=1, max_size=3))),
    ),
    max_leaves=8,
)


class _Tool:
    def __init__(self, name: str, description: str, parameters: dict[str, Any] | None) -> None:
        self.name, self.description, self.parameters = name, description, parameters


@SETTINGS
@given(st.lists(st.tuples(st.from_regex(r"[a-z_]{1,10}", fullmatch=True), words,
                          st.one_of(st.none(), schemas.map(lambda s: {**s, "type": "object"}), schemas)),
                min_size=1, max_size=3))
def test_tool_namespace_matches_openai_harmony(oh: Any, enc: Any, tools: list[tuple[str, str, Any]]) -> None:
    """Any schema, nested objects, oneOf, enums, defaults, multi-line descriptions (issue 10)."""
    ours = render_tool_signatures([_Tool(*t) for t in tools])
    dev = oh.DeveloperContent.new().with_function_tools([oh.ToolDescription.new(*t) for t in tools])
    ref = enc.decode_utf8(enc.render(oh.Message.from_role_and_content(oh.Role.DEVELOPER, dev)))
    assert ref == f"<|start|>developer<|message|>{ours}<|end|>"


def test_multiline_tool_description_stays_inside_comments(codec: HarmonyCodec) -> None:
    text = render_tool_signatures([_Tool("f", "Line one.\nLine two.\r\n\nLast.", {"type": "object"})])
    assert "// Line one.\n// Line two.\n// \n// Last.\ntype f = (_: {\n}) => any;" in text


# ----------------------------------------------------------------------------- messages
header_words = st.from_regex(r"[a-z_.]{1,12}", fullmatch=True)
message = st.builds(
    Message,
    role=st.sampled_from(["system", "developer", "user", "assistant", "functions.lookup"]),
    content=words,
    channel=st.one_of(st.none(), st.sampled_from(["analysis", "commentary", "final"])),
    recipient=st.one_of(st.none(), header_words.map(lambda w: f"functions.{w}"), st.just("assistant")),
    constrain=st.one_of(st.none(), st.just("json")),
)


def _reference_message(oh: Any, m: Message) -> Any:
    if m.role.startswith("functions."):
        ref = oh.Message.from_author_and_content(oh.Author.new(oh.Role.TOOL, m.role), m.content)
    else:
        ref = oh.Message.from_role_and_content(oh.Role(m.role), m.content)
    if m.channel:
        ref = ref.with_channel(m.channel)
    if m.recipient:
        ref = ref.with_recipient(m.recipient)
    if m.constrain:
        ref = ref.with_content_type(f"<|constrain|>{m.constrain}")
    return ref


@SETTINGS
@given(message)
def test_each_message_renders_like_openai_harmony(oh: Any, enc: Any, codec: HarmonyCodec, m: Message) -> None:
    if m.role == "assistant" and m.recipient is not None:
        m.end = "<|call|>"  # openai-harmony ends an assistant message to a recipient with <|call|>
    assert codec.render(m) == list(enc.render(_reference_message(oh, m)))


# ----------------------------------------------------------------------------- parsing
@st.composite
def completion(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """A GPT-OSS-style completion after "<|start|>assistant": preambles, then an answer or a call
    in one of the header variants GPT-OSS emits."""
    msgs = [(draw(st.sampled_from(["analysis", "commentary"])), draw(words), "")
            for _ in range(draw(st.integers(0, 2)))]
    kind = draw(st.sampled_from(["final", "call_header", "call_channel", "call_plain_json", "call_no_type"]))
    return [*msgs, (kind, draw(words), draw(header_words))]


def _completion_ids(codec: HarmonyCodec, spec: list[tuple[str, str, str]]) -> list[int]:
    t, ids = codec.tok, []
    for i, (kind, text, name) in enumerate(spec):
        head = [] if i == 0 else [codec.START, *t.encode("assistant")]
        body = [codec.MESSAGE, *t.encode(text)]
        if kind in ("analysis", "commentary"):
            ids += head + [codec.CHANNEL, *t.encode(kind)] + body + [codec.END]
        elif kind == "final":
            ids += head + [codec.CHANNEL, *t.encode("final")] + body + [codec.RETURN]
        elif kind == "call_header":  # what openai-harmony renders
            ids += head + [*t.encode(f" to=functions.{name}"), codec.CHANNEL, *t.encode("commentary"),
                           *t.encode(" "), codec.CONSTRAIN, *t.encode("json")] + body + [codec.CALL]
        elif kind == "call_channel":  # what GPT-OSS often samples: recipient after the channel
            ids += head + [codec.CHANNEL, *t.encode(f"commentary to=functions.{name} "), codec.CONSTRAIN,
                           *t.encode("json")] + body + [codec.CALL]
        elif kind == "call_plain_json":
            ids += head + [codec.CHANNEL, *t.encode(f"commentary to=functions.{name} json")] + body + [codec.CALL]
        else:
            ids += head + [codec.CHANNEL, *t.encode(f"commentary to=functions.{name}")] + body + [codec.CALL]
    return ids


@SETTINGS
@given(completion())
def test_parse_agrees_with_openai_harmony(oh: Any, enc: Any, codec: HarmonyCodec,
                                          spec: list[tuple[str, str, str]]) -> None:
    ids = _completion_ids(codec, spec)
    ours = codec.parse(ids)
    assert not [e for e in ours.errors if e.code not in ("bad_json", "no_action")], ours.errors
    assert our_tuples(ours) == as_tuples(enc.parse_messages_from_completion_tokens(ids, oh.Role.ASSISTANT))


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                           "<|return|>", "<|call|>", "assistant", " to=functions.f", "final",
                                           "commentary", " json", " ", "{}"]), words), max_size=14))
def test_parse_is_tolerant_where_openai_harmony_fails(oh: Any, enc: Any, codec: HarmonyCodec,
                                                      pieces: list[str]) -> None:
    """Arbitrary mixtures: ours never raises; whenever both call it well formed, they agree."""
    from agentgym.tokenizers import encode_harmony_text

    ids = encode_harmony_text(codec.tok, "".join(pieces))
    ours = codec.parse(ids)  # total
    try:
        ref = enc.parse_messages_from_completion_tokens(ids, oh.Role.ASSISTANT)
    except Exception:  # openai-harmony raises on malformed headers and stray tokens
        return
    if not [e for e in ours.errors if e.code not in ("bad_json", "no_action", "no_stop", "unknown_recipient",
                                                     "wrong_stop")]:
        assert our_tuples(ours) == as_tuples(ref)


def test_tool_call_places_the_recipient_in_the_role_header(codec: HarmonyCodec) -> None:
    text = codec.tok.decode(codec.generation_prompt + codec.tool_call_ids("add", {"a": 1}))
    assert text == '<|start|>assistant to=functions.add<|channel|>commentary <|constrain|>json<|message|>{"a": 1}<|call|>'
    assert json.loads(codec.parse(codec.tool_call_ids("add", {"a": 1})).tool_call.raw) == {"a": 1}
