"""The Harmony codec: messages to token ids and sampled ids back to messages.

Harmony is GPT-OSS's chat format::

    <|start|>{role}[ to={recipient}]<|channel|>{channel}[ to={recipient}][ <|constrain|>json]<|message|>{content}{end}

where ``{end}`` is ``<|end|>`` (more messages follow), ``<|call|>`` (a tool call, the engine
stops) or ``<|return|>`` (the final answer, the episode ends). A tool result comes back as
``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>...<|end|>`` followed by
the generation prompt ``<|start|>assistant``.

The codec never re-renders history: the environment renders each *new* piece once and the
episode's token stream only grows. Parsing is total: any id sequence yields a
:class:`ParsedAction`, with problems listed in ``errors`` instead of raised.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.tokenizers import Tokenizer

__all__ = [
    "HarmonyCodec",
    "Message",
    "ParseError",
    "ParsedAction",
    "ToolCall",
    "render_tool_signatures",
]

STOP_TOKENS = ("<|call|>", "<|return|>")


@dataclass(slots=True)
class Message:
    role: str  # "system" | "developer" | "user" | "assistant" | "functions.NAME"
    content: str
    channel: str | None = None  # "analysis" | "commentary" | "final"
    recipient: str | None = None  # "functions.NAME" on a tool call, "assistant" on a result
    constrain: str | None = None  # "json" on a tool call
    end: str = "<|end|>"  # the token that closed it: "<|end|>", "<|call|>" or "<|return|>"


@dataclass(slots=True)
class ToolCall:
    name: str  # without the "functions." namespace
    arguments: dict[str, Any] | None  # None when the JSON did not parse to an object
    raw: str  # the message content as sampled


@dataclass(slots=True)
class ParseError:
    code: str  # stable, machine-readable: "empty", "no_stop", "bad_json", ...
    message: str  # for the model and for humans

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(slots=True)
class ParsedAction:
    messages: list[Message] = field(default_factory=list)
    stop: str | None = None  # "<|call|>", "<|return|>" or None when the action never stopped
    tool_call: ToolCall | None = None
    final: str | None = None
    errors: list[ParseError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _ts_type(schema: dict[str, Any]) -> str:
    """A JSON schema as the TypeScript-like type Harmony's developer message uses."""
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    t = schema.get("type", "any")
    if isinstance(t, list):
        return " | ".join(_ts_type({**schema, "type": x}) for x in t)
    if t == "array":
        return f"{_ts_type(schema.get('items', {}))}[]"
    if t == "object":
        props = schema.get("properties")
        if not props:
            return "object"
        req = set(schema.get("required", []))
        inner = ", ".join(
            f"{k}{'' if k in req else '?'}: {_ts_type(v)}" for k, v in props.items()
        )
        return "{ " + inner + " }"
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean",
            "null": "null"}.get(t, "any")


def render_tool_signatures(tools: Sequence[Any]) -> str:
    """The ``# Tools`` section of the developer message for objects with name/description/parameters."""
    lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for t in tools:
        lines.append(f"// {t.description}")
        props = t.parameters.get("properties") or {}
        if not props:
            lines.append(f"type {t.name} = () => any;")
        else:
            req = set(t.parameters.get("required", []))
            lines.append(f"type {t.name} = (_: {{")
            for k, v in props.items():
                if "description" in v:
                    lines.append(f"// {v['description']}")
                default = f" // default: {json.dumps(v['default'])}" if "default" in v else ""
                lines.append(f"{k}{'' if k in req else '?'}: {_ts_type(v)},{default}")
            lines.append("}) => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines)


class HarmonyCodec:
    """Renders Harmony messages to ids and parses sampled ids, for one tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer
        sid = tokenizer.special_id
        self.START, self.END, self.MESSAGE = sid("<|start|>"), sid("<|end|>"), sid("<|message|>")
        self.CHANNEL, self.CONSTRAIN = sid("<|channel|>"), sid("<|constrain|>")
        self.RETURN, self.CALL = sid("<|return|>"), sid("<|call|>")
        self.stop_ids = (self.CALL, self.RETURN)
        self._name = {self.START: "<|start|>", self.END: "<|end|>", self.MESSAGE: "<|message|>",
                      self.CHANNEL: "<|channel|>", self.CONSTRAIN: "<|constrain|>",
                      self.RETURN: "<|return|>", self.CALL: "<|call|>"}
        self._end_id = {"<|end|>": self.END, "<|call|>": self.CALL, "<|return|>": self.RETURN}
        self.generation_prompt: list[int] = [self.START, *tokenizer.encode("assistant")]

    # ------------------------------------------------------------------ rendering
    def render(self, msg: Message) -> list[int]:
        enc = self.tok.encode
        if msg.role == "assistant" or msg.recipient is None:
            head = msg.role
        else:  # tool results put the recipient after the author: "functions.x to=assistant"
            head = f"{msg.role} to={msg.recipient}"
        ids = [self.START, *enc(head)]
        if msg.channel is not None:
            chan = msg.channel
            if msg.role == "assistant" and msg.recipient:
                chan += f" to={msg.recipient}"
            ids += [self.CHANNEL, *enc(chan)]
        if msg.constrain:
            ids += [*enc(" "), self.CONSTRAIN, *enc(msg.constrain)]
        ids += [self.MESSAGE, *enc(msg.content), self._end_id[msg.end]]
        return ids

    def render_many(self, messages: Sequence[Message]) -> list[int]:
        out: list[int] = []
        for m in messages:
            out += self.render(m)
        return out

    def render_prompt(self, messages: Sequence[Message]) -> list[int]:
        """Messages followed by the assistant generation prompt."""
        return self.render_many(messages) + self.generation_prompt

    def render_tool_result(self, name: str, content: str) -> list[int]:
        """A tool's answer to the assistant, then the generation prompt."""
        msg = Message(f"functions.{name}", content, channel="commentary", recipient="assistant")
        return self.render(msg) + self.generation_prompt

    def tool_call_ids(self, name: str, arguments: dict[str, Any], analysis: str | None = None) -> list[int]:
        """What a policy samples to call a tool (after the generation prompt). For oracles and SFT."""
        ids: list[int] = []
        if analysis is not None:
            ids += self._continuation(Message("assistant", analysis, channel="analysis"))
            ids += [self.START, *self.tok.encode("assistant")]
        call = Message("assistant", json.dumps(arguments), channel="commentary",
                       recipient=f"functions.{name}", constrain="json", end="<|call|>")
        return ids + self._continuation(call)

    def final_ids(self, answer: str, analysis: str | None = None) -> list[int]:
        """What a policy samples to give a final answer (after the generation prompt)."""
        ids: list[int] = []
        if analysis is not None:
            ids += self._continuation(Message("assistant", analysis, channel="analysis"))
            ids += [self.START, *self.tok.encode("assistant")]
        return ids + self._continuation(Message("assistant", answer, channel="final", end="<|return|>"))

    def _continuation(self, msg: Message) -> list[int]:
        # The generation prompt already holds "<|start|>assistant": drop it from the render.
        full = self.render(msg)
        return full[len(self.generation_prompt):]

    # ------------------------------------------------------------------ parsing
    def _items(self, ids: Sequence[int]) -> list[str | int]:
        """Split ids into decoded text runs (str) and Harmony special ids (int)."""
        items: list[str | int] = []
        run: list[int] = []
        specials = self._name
        for i in ids:
            if i in specials:
                if run:
                    items.append(self.tok.decode(run))
                    run = []
                items.append(i)
            else:
                run.append(i)
        if run:
            items.append(self.tok.decode(run))
        return items

    def parse(self, ids: Sequence[int], role: str = "assistant") -> ParsedAction:
        """Parse what a policy sampled after the generation prompt ``<|start|>{role}``.

        Never raises on content: problems are reported in ``ParsedAction.errors``.
        """
        out = ParsedAction()
        if len(ids) == 0:
            out.errors.append(ParseError("empty", "the action contained no tokens"))
            return out
        items = self._items(ids)
        state = "header"  # header -> content -> between -> header ...
        fields: dict[str, str] = {"role": role}
        field_name = "role"
        content: list[str] = []
        for item in items:
            if out.stop is not None:
                out.errors.append(ParseError(
                    "text_after_stop", f"tokens after {out.stop} were ignored; stop sampling there"))
                break
            if isinstance(item, str):
                if state == "header":
                    fields[field_name] = fields.get(field_name, "") + item
                elif state == "content":
                    content.append(item)
                elif item.strip():
                    out.errors.append(ParseError(
                        "stray_text", f"text {item[:40]!r} between messages; expected <|start|>"))
                continue
            name = self._name[item]
            if state == "header":
                if item == self.CHANNEL:
                    field_name = "channel"
                elif item == self.CONSTRAIN:
                    field_name = "constrain"
                elif item == self.MESSAGE:
                    state, content = "content", []
                else:
                    out.errors.append(ParseError(
                        "bad_header", f"unexpected {name} in a message header; expected <|message|>"))
                    state = "between"
            elif state == "content":
                if item in (self.END, self.CALL, self.RETURN):
                    out.messages.append(self._message(fields, "".join(content), name))
                    if item != self.END:
                        out.stop = name
                    state = "between"
                else:
                    # A special inside content: close the message as if <|end|> were missing.
                    out.errors.append(ParseError(
                        "missing_end", f"{name} inside message content; expected <|end|> first"))
                    out.messages.append(self._message(fields, "".join(content), "<|end|>"))
                    state = "between"
                    if item == self.START:
                        state, fields, field_name = "header", {"role": ""}, "role"
            else:  # between messages
                if item == self.START:
                    state, fields, field_name = "header", {"role": ""}, "role"
                else:
                    out.errors.append(ParseError(
                        "unexpected_token", f"{name} between messages; expected <|start|>"))
        if state == "content":
            out.messages.append(self._message(fields, "".join(content), "<|end|>"))
            out.errors.append(ParseError(
                "no_stop", "the message was cut off before <|end|>, <|call|> or <|return|>"))
        elif state == "header" and out.stop is None:
            out.errors.append(ParseError("no_stop", "the action ended inside a message header"))
        elif out.stop is None:
            out.errors.append(ParseError(
                "no_stop", "the action ended without <|call|> (tool call) or <|return|> (final answer)"))
        self._interpret(out)
        return out

    @staticmethod
    def _message(fields: dict[str, str], content: str, end: str) -> Message:
        role_text = fields.get("role", "").strip()
        chan_text = fields.get("channel", "").strip()
        recipient = None
        words = role_text.split() + chan_text.split()
        for w in words:
            if w.startswith("to="):
                recipient = w[3:]
        role = role_text.split()[0] if role_text.split() else "assistant"
        chan_words = [w for w in chan_text.split() if not w.startswith("to=")]
        channel = chan_words[0] if chan_words else None
        constrain = fields.get("constrain", "").strip() or (chan_words[1] if len(chan_words) > 1 else None)
        return Message(role, content, channel, recipient, constrain, end)

    def _interpret(self, out: ParsedAction) -> None:
        """Find the tool call or final answer in the parsed messages."""
        if not out.messages:
            return
        last = out.messages[-1]
        if last.recipient is not None:
            if not last.recipient.startswith("functions."):
                out.errors.append(ParseError(
                    "unknown_recipient",
                    f"recipient {last.recipient!r} is not a tool; address tools as functions.NAME"))
                return
            name = last.recipient[len("functions."):]
            try:
                args = json.loads(last.content) if last.content.strip() else {}
            except (json.JSONDecodeError, RecursionError) as e:
                out.errors.append(ParseError("bad_json", f"tool arguments are not valid JSON: {e}"))
                args = None
            if args is not None and not isinstance(args, dict):
                out.errors.append(ParseError(
                    "bad_json", f"tool arguments must be a JSON object, got {type(args).__name__}"))
                args = None
            if out.stop == "<|return|>":
                out.errors.append(ParseError("wrong_stop", "a tool call must end with <|call|>"))
            out.tool_call = ToolCall(name, args, last.content)
        elif last.channel == "final":
            out.final = last.content
            if out.stop == "<|call|>":
                out.errors.append(ParseError("wrong_stop", "a final answer must end with <|return|>"))
        elif out.stop is not None:
            out.errors.append(ParseError(
                "no_action", f"the last message (channel {last.channel!r}) is neither a tool call "
                "(to=functions.NAME) nor a final answer (channel final)"))
