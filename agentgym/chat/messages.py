"""OpenAI-style chat messages <-> Harmony, in both directions, with the codec's public methods.

One mapping, used by the chat wrapper (assistant message -> the action tokens the model would
have sampled; observation tokens -> tool / user messages) and by agentgym's chat server (a
request's messages -> prompt tokens; sampled tokens -> an assistant message):

===========================================  ==============================================
chat                                         Harmony (after ``<|start|>assistant``)
===========================================  ==============================================
``reasoning_content`` (or ``reasoning``)     ``<|channel|>analysis<|message|>...<|end|>``
``content`` beside ``tool_calls``            ``<|channel|>commentary<|message|>...<|end|>``
``tool_calls[0]``                            ``<|channel|>commentary to=functions.NAME
                                             <|constrain|>json<|message|>ARGS<|call|>``
``content`` alone                            ``<|channel|>final<|message|>...<|return|>``
``reasoning_content`` alone (content null)   the analysis message, no stop: the env answers
                                             with a notice and the episode goes on
``{"role": "tool", ...}``                    ``<|start|>functions.NAME to=assistant
                                             <|channel|>commentary<|message|>...<|end|>``
``{"role": "user", ...}``                    ``<|start|>user<|message|>...<|end|>``
===========================================  ==============================================

Harmony has one tool call per assistant turn (sampling stops at ``<|call|>``): calls after the
first are not part of the action; the wrapper answers them with a tool message saying so.
Tool-call ``arguments`` are kept as the exact string the model wrote (bad JSON included: the
environment judges it), so a GPT-OSS action survives the round trip token for token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.harmony import HarmonyCodec, Message, ParsedAction

__all__ = [
    "ROLES",
    "AssistantTurn",
    "ToolSpec",
    "action_ids",
    "assistant_message",
    "assistant_turn",
    "harmony_messages",
    "message_text",
    "observation_messages",
    "tool_schemas",
    "tool_specs",
]

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the Harmony developer message needs of a tool (a chat request carries no functions)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class AssistantTurn:
    """An assistant chat message read into the parts Harmony can carry."""

    reasoning: str | None
    content: str | None
    call: dict[str, Any] | None  # the first tool call, normalised: {"id", "type", "function": {...}}
    dropped: list[dict[str, Any]] = field(default_factory=list)  # calls after the first
    notes: list[str] = field(default_factory=list)  # what was coerced, for info


def tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas from objects with ``name``/``description``/``parameters``
    (``agentgym.Tool``): the same objects the Harmony developer message is rendered from."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": json.loads(json.dumps(t.parameters))}}
            for t in tools]


def tool_specs(schemas: Sequence[Any]) -> list[ToolSpec]:
    """The inverse of :func:`tool_schemas` for a request's ``tools``; raises ``ValueError`` on bad ones."""
    out = []
    for i, s in enumerate(schemas):
        fn = s.get("function") if isinstance(s, Mapping) else None
        if not isinstance(fn, Mapping) or s.get("type", "function") != "function" \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, "
                             f"'description': str, 'parameters': object}}}}, got {json.dumps(s)[:200]}")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, Mapping):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema object")
        out.append(ToolSpec(fn["name"], str(fn.get("description") or ""), dict(params)))
    return out


def message_text(content: Any) -> str | None:
    """A message's ``content`` as text: a string, None, or a list of ``{"type": "text"}`` parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content)
    return str(content)


def _call(raw: Any, index: int, notes: list[str]) -> dict[str, Any]:
    """One ``tool_calls`` entry normalised; never raises (a policy's message is hostile input)."""
    raw = raw if isinstance(raw, Mapping) else {}
    fn = raw.get("function") if isinstance(raw.get("function"), Mapping) else {}
    name = fn.get("name")
    if not isinstance(name, str):
        notes.append(f"tool_calls[{index}].function.name is missing or not a string")
        name = str(name or "")
    args = fn.get("arguments", "")
    if not isinstance(args, str):  # some clients send the object itself
        notes.append(f"tool_calls[{index}].function.arguments was a {type(args).__name__}, not a JSON string")
        args = json.dumps(args)
    call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def assistant_turn(message: Any) -> AssistantTurn:
    """Read an assistant message (a dict, or an object with ``model_dump()`` like the openai
    SDK's; a bare string is its ``content``). Never raises."""
    notes: list[str] = []
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    elif hasattr(message, "model_dump") and not isinstance(message, Mapping):
        message = message.model_dump()
    if not isinstance(message, Mapping):
        notes.append(f"expected an assistant message (a dict with content and/or tool_calls), "
                     f"got {type(message).__name__}; read as an empty answer")
        message = {}
    if "role" not in message:
        notes.append("the message has no role; read as 'assistant'")
    elif message.get("role") != "assistant":
        notes.append(f"role {message.get('role')!r} read as 'assistant'")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        notes.append("tool_calls must be a list; ignored")
        raw_calls = []
    calls = [_call(c, i, notes) for i, c in enumerate(raw_calls)]
    return AssistantTurn(message_text(reasoning) or None, message_text(message.get("content")),
                         calls[0] if calls else None, calls[1:], notes)


def harmony_messages(turn: AssistantTurn, *, final_end: str = "<|return|>") -> list[Message]:
    """The Harmony assistant messages of a turn (module table). ``final_end``: ``<|return|>``
    for an action, ``<|end|>`` for an earlier answer in a conversation's history."""
    out: list[Message] = []
    if turn.reasoning:
        out.append(Message("assistant", turn.reasoning, channel="analysis"))
    if turn.call is not None:
        if turn.content:
            out.append(Message("assistant", turn.content, channel="commentary"))
        fn = turn.call["function"]
        out.append(Message("assistant", fn["arguments"], channel="commentary",
                           recipient=f"functions.{fn['name']}", constrain="json", end="<|call|>"))
    elif turn.content is not None or not turn.reasoning:  # an empty message is an empty answer
        out.append(Message("assistant", turn.content or "", channel="final", end=final_end))
    return out


def action_ids(codec: HarmonyCodec, turn: AssistantTurn) -> list[int]:
    """The tokens a model would sample for ``turn`` after the generation prompt ``<|start|>assistant``."""
    ids = codec.render_many(harmony_messages(turn))
    head = codec.generation_prompt
    assert ids[: len(head)] == head  # every assistant render starts with the generation prompt
    return ids[len(head):]


def assistant_message(parsed: ParsedAction, text: str, call_id: str) -> dict[str, Any]:
    """A sampled Harmony action as an OpenAI assistant message (``text``: the decoded action,
    the content when nothing in it parses as a message)."""
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    analysis = [m.content for m in parsed.messages if m.channel == "analysis"]
    if analysis:
        msg["reasoning_content"] = "\n".join(analysis)
    if parsed.tool_call is not None:
        preamble = [m.content for m in parsed.messages[:-1] if m.channel == "commentary" and m.recipient is None]
        msg["content"] = "\n".join(preamble) or None
        msg["tool_calls"] = [{"id": call_id, "type": "function",
                              "function": {"name": parsed.tool_call.name, "arguments": parsed.tool_call.raw}}]
    elif parsed.final is not None:
        msg["content"] = parsed.final
    else:  # no answer and no call: show what was written (the last message, else the raw text)
        spoken = [m for m in parsed.messages if m.channel != "analysis"]
        msg["content"] = spoken[-1].content if spoken else (None if analysis else text)
    return msg


def observation_messages(codec: HarmonyCodec, ids: Sequence[int], call_id: str | None) -> list[dict[str, Any]]:
    """The messages an environment appended (a tool result, a user notice), minus the trailing
    generation prompt, as chat messages. Each must re-render to exactly its ids with the codec's
    own renderers (``render_tool_result``, ``render``), else ``ValueError``: nothing is guessed."""
    ids = list(ids)
    head = codec.generation_prompt
    if ids[:1] == [codec.END]:  # the env closes a cut-off action first
        ids = ids[1:]
    if ids[-len(head):] == head:
        ids = ids[: -len(head)]
    out: list[dict[str, Any]] = []
    while ids:
        if ids[0] != codec.START or codec.MESSAGE not in ids or codec.END not in ids:
            raise ValueError("observation is not a sequence of complete Harmony messages")
        mid, end = ids.index(codec.MESSAGE), ids.index(codec.END)
        header = ids[1:mid]
        cut = next((i for i, t in enumerate(header) if t in (codec.CHANNEL, codec.CONSTRAIN)), len(header))
        words = codec.tok.decode(header[:cut]).split()
        role, content = (words[0] if words else ""), codec.tok.decode(ids[mid + 1:end])
        if role.startswith("functions."):
            expected = codec.render_tool_result(role[len("functions."):], content)[: -len(head)]
            msg = {"role": "tool", "tool_call_id": call_id or "", "content": content}
        else:
            expected = codec.render(Message(role, content))
            msg = {"role": role if role in ROLES else "user", "content": content}
        if ids[: end + 1] != expected:
            raise ValueError(f"observation message {role!r} is not what the codec renders")
        out.append(msg)
        ids = ids[end + 1:]
    return out
