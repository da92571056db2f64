"""The Harmony codec: messages to token ids and sampled ids back to messages.

Harmony is GPT-OSS's chat format::

    <|start|>{role}[ to={recipient}][<|channel|>{channel}][ <|constrain|>json]<|message|>{content}{end}

where ``{end}`` is ``<|end|>`` (more messages follow), ``<|call|>`` (a tool call, the engine
stops) or ``<|return|>`` (the final answer, the episode ends). A tool call is
``<|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{...}<|call|>``;
its result comes back as ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>...<|end|>``
followed by the generation prompt ``<|start|>assistant``.

openai-harmony (OpenAI's renderer) is the reference: with GPT-OSS's tokenizer
(``tokenizer="o200k_harmony"``) every message rendered here is token-for-token what it renders
(the tool namespace comes from :mod:`agentgym.harmony_schema`, a port of its TypeScript
rendering), and headers are parsed with its rules (the recipient may stand after the role or
after the channel; the last header word is the content type). The suite checks both against
openai-harmony itself. Unlike openai-harmony's parser, :meth:`HarmonyCodec.parse` is total: any
id sequence yields a :class:`ParsedAction`, with problems listed in ``errors`` instead of raised.

The codec never re-renders history: the environment renders each *new* piece once and the
episode's token stream only grows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.harmony_schema import render_tool_signatures
from agentgym.tokenizers import Tokenizer

__all__ = [
    "HarmonyCodec",
    "Message",
    "ParseError",
    "ParsedAction",
    "ToolCall",
    "render_tool_signatures",
]

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
        """One message, as openai-harmony renders it (each header piece encoded on its own)."""
        enc = self.tok.encode
        ids = [self.START, *enc(msg.role)]
        if msg.recipient is not None and msg.recipient != "all":
            ids += enc(f" to={msg.recipient}")
        if msg.channel is not None:
            ids += [self.CHANNEL, *enc(msg.channel)]
        if msg.constrain:
            ids += [*enc(" "), self.CONSTRAIN, *enc(msg.constrain)]
        return ids + [self.MESSAGE, *enc(msg.content), self._end_id[msg.end]]

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

        ``role=""``: ``ids`` follow a bare ``<|start|>``, so the header names the role.

        Never raises on content: problems are reported in ``ParsedAction.errors``.
        """
        out = ParsedAction()
        if len(ids) == 0:
            out.errors.append(ParseError("empty", "the action contained no tokens"))
            return out
        items = self._items(ids)
        state = "header"  # header -> content -> between -> header ...
        header = ""  # header text, with <|channel|> and <|constrain|> spelled out
        # "" (or None): the role is the first word of the header, as after a bare <|start|>
        header_role: str | None = role or None
        head: tuple[str, str | None, str | None, str | None] = (role, None, None, None)
        content: list[str] = []
        for item in items:
            if out.stop is not None:
                out.errors.append(ParseError(
                    "text_after_stop", f"tokens after {out.stop} were ignored; stop sampling there"))
                break
            if isinstance(item, str):
                if state == "header":
                    header += item
                elif state == "content":
                    content.append(item)
                elif item.strip():
                    out.errors.append(ParseError(
                        "stray_text", f"text {item[:40]!r} between messages; expected <|start|>"))
                continue
            name = self._name[item]
            if state == "header":
                if item in (self.CHANNEL, self.CONSTRAIN):
                    header += name
                elif item == self.MESSAGE:
                    head = _parse_header(header, header_role, out.errors)
                    state, content = "content", []
                else:
                    out.errors.append(ParseError(
                        "bad_header", f"unexpected {name} in a message header; expected <|message|>"))
                    state = "between"
            elif state == "content":
                if item in (self.END, self.CALL, self.RETURN):
                    out.messages.append(Message(head[0], "".join(content), *head[1:], end=name))
                    if item != self.END:
                        out.stop = name
                    state = "between"
                else:
                    # A special inside content: close the message as if <|end|> were missing.
                    out.errors.append(ParseError(
                        "missing_end", f"{name} inside message content; expected <|end|> first"))
                    out.messages.append(Message(head[0], "".join(content), *head[1:]))
                    state = "between"
                    if item == self.START:
                        state, header, header_role = "header", "", None
            else:  # between messages
                if item == self.START:
                    state, header, header_role = "header", "", None
                else:
                    out.errors.append(ParseError(
                        "unexpected_token", f"{name} between messages; expected <|start|>"))
        if state == "content":
            out.messages.append(Message(head[0], "".join(content), *head[1:]))
            out.errors.append(ParseError(
                "no_stop", "the message was cut off before <|end|>, <|call|> or <|return|>"))
        elif state == "header" and out.stop is None:
            out.errors.append(ParseError("no_stop", "the action ended inside a message header"))
        elif out.stop is None:
            out.errors.append(ParseError(
                "no_stop", "the action ended without <|call|> (tool call) or <|return|> (final answer)"))
        self._interpret(out)
        return out

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


_ASCII_SPACE = re.compile(r"[ \t\n\x0c\r]+")  # Rust's split_ascii_whitespace
_CHANNEL_END = re.compile(r"[\s<]")


def _parse_header(
    text: str, role: str | None, errors: list[ParseError]
) -> tuple[str, str | None, str | None, str | None]:
    """A message header -> (role, channel, recipient, constrain), by openai-harmony's rules.

    ``text`` is what stood between ``<|start|>`` (or the given ``role``) and ``<|message|>``,
    with ``<|channel|>``/``<|constrain|>`` spelled out. The channel is the word after
    ``<|channel|>``; of the remaining words the last is the recipient when it starts with
    ``to=`` (or is the only one), else the content type, preceded by the recipient. Where
    openai-harmony raises, a :class:`ParseError` is added and the best reading is returned.
    """
    channel = None
    idx = text.find("<|channel|>")
    if idx >= 0:
        after = text[idx + len("<|channel|>"):]
        m = _CHANNEL_END.search(after)
        cut = m.start() if m else len(after)
        if cut:
            channel = after[:cut]
        else:
            errors.append(ParseError("bad_header", "<|channel|> is not followed by a channel name"))
        text = text[:idx] + after[cut:]
    text = text.strip()
    if "<|constrain|>" in text:
        text = text.replace("<|constrain|>", " <|constrain|>").strip()
    parts = [p for p in _ASCII_SPACE.split(text) if p]
    if role is None:
        if not parts:
            errors.append(ParseError("bad_header", "the message header names no role"))
            role = ""
        else:
            role = parts[0]
            if role not in _ROLES and (len(parts) > 1 or role.startswith("to=")):
                parts.pop(0)  # a tool's name as author: "functions.NAME to=assistant"
    if parts and parts[0] == role:
        parts.pop(0)
    recipient = content_type = None
    if parts:
        n, last = len(parts), parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif n == 1:
            recipient = last
        else:
            content_type = last
            raw = parts.pop()
            recipient = raw[3:] if raw.startswith("to=") else raw
        if parts:
            errors.append(ParseError("bad_header", f"unexpected words {parts} in the message header"))
    constrain = content_type.removeprefix("<|constrain|>") if content_type is not None else None
    return role, channel, recipient, constrain or None


_ROLES = ("system", "developer", "user", "assistant", "tool")
