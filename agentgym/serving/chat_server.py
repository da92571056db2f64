"""Chat completions with tool calling over a token engine: the server side of ``agentgym.chat.chat_wire``.

A request's messages are rendered in Harmony (the env's own preamble: ``harmony_preamble``
for the system message and tools, then ``agentgym.chat.messages`` for the turns), the engine
samples the assistant's action until ``<|call|>`` or ``<|return|>``, and the codec parses it
back into an assistant message with ``tool_calls``. History is rendered as sent, analysis
included (nothing is dropped or rewritten: an episode's prompt is the env's token stream);
an earlier final answer closes with ``<|end|>``, as GPT-OSS's chat template writes it.

``tool_choice``: ``auto`` lets the model choose; a named function (or ``required`` with one
tool) forces the header ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>``
and the model writes the arguments (no JSON-schema-guided decoding: they may be invalid);
``none`` forces ``<|channel|>final<|message|>``. Forcing skips the analysis channel.
``stream: true`` is served whole: the completion is generated first, then sent as server-sent
events, one chunk per choice carrying the whole message (``delta``) and its finish reason, a
usage chunk when ``stream_options.include_usage`` asks for one, then ``data: [DONE]``
(:func:`stream_events`; agent loops such as verifiers' chat program always stream).
Engine-agnostic: anything with the rollout engines' ``generate`` works.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentgym.chat.messages import (
    ROLES,
    ToolSpec,
    assistant_message,
    assistant_turn,
    harmony_messages,
    message_text,
    tool_specs,
)
from agentgym.env import harmony_preamble
from agentgym.harmony import HarmonyCodec, Message

__all__ = ["REASONING_EFFORTS", "chat_completion", "render_conversation", "stream_events"]

REASONING_EFFORTS = ("low", "medium", "high")
MAX_N = 16
# Request fields accepted only at their neutral value: sampling is plain temperature sampling
# (the log-probs then equal the trainer's), text only.
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "top_p": lambda v: v is None or float(v) == 1.0,
    "top_k": lambda v: v is None or int(v) in (-1, 0),
    "frequency_penalty": lambda v: not v,
    "presence_penalty": lambda v: not v,
    "logit_bias": lambda v: not v,
    "stop": lambda v: not v,
    "top_logprobs": lambda v: not v,
    "response_format": lambda v: v is None or (isinstance(v, Mapping) and v.get("type") == "text"),
}


def stream_events(completion: Mapping[str, Any], include_usage: bool = False) -> list[bytes]:
    """A finished completion as the server-sent events of a streamed one (module doc)."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    events = []
    for ch in completion["choices"]:
        delta = dict(ch["message"])
        if delta.get("tool_calls"):  # a stream's tool-call deltas carry their position
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        choice = {"index": ch["index"], "delta": delta, "finish_reason": ch["finish_reason"],
                  "logprobs": ch.get("logprobs")}
        extra = {"token_ids": ch["token_ids"]} if "token_ids" in ch else {}
        events.append({**head, "object": "chat.completion.chunk", "choices": [{**choice, **extra}]})
    if include_usage:
        events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def render_conversation(codec: HarmonyCodec, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[ToolSpec], reasoning_effort: str) -> list[int]:
    """Prompt ids for a chat request: preamble, turns, then the generation prompt.

    A leading system (or developer) message is the developer message's instructions, as
    GPT-OSS's chat template does; later ones become developer messages. Raises ``ValueError``
    on a message the conversation cannot hold.
    """
    msgs = list(messages)
    instructions = None
    if msgs and msgs[0].get("role") in ("system", "developer"):
        instructions = message_text(msgs.pop(0).get("content")) or ""
    preamble = harmony_preamble(instructions or "", tools, reasoning_effort)
    out: list[Message] = preamble if instructions is not None or tools else preamble[:1]
    names: dict[str, str] = {}  # tool_call_id -> function name, to address tool results
    for i, m in enumerate(msgs):
        role, text = m.get("role"), message_text(m.get("content")) or ""
        if role in ("system", "developer"):
            out.append(Message("developer", text))
        elif role == "user":
            out.append(Message("user", text))
        elif role == "assistant":
            turn = assistant_turn(m)
            for c in [turn.call, *turn.dropped] if turn.call else []:
                if c["id"]:
                    names[c["id"]] = c["function"]["name"]
            out += harmony_messages(turn, final_end="<|end|>")
        elif role == "tool":
            name = m.get("name") or names.get(str(m.get("tool_call_id")))
            if not isinstance(name, str):
                raise ValueError(f"messages[{i + (instructions is not None)}] (role tool) answers "
                                 f"tool_call_id {m.get('tool_call_id')!r}, which no earlier assistant "
                                 "tool call has; send the assistant message with its tool_calls first")
            out.append(Message(f"functions.{name}", text, channel="commentary", recipient="assistant"))
        else:
            raise ValueError(f"messages[{i}].role must be one of {list(ROLES)}, got {role!r}")
    return codec.render_prompt(out)


def _forced_header(codec: HarmonyCodec, tool_choice: Any, tools: Sequence[ToolSpec]) -> list[int]:
    """The action header ``tool_choice`` forces (module doc); [] for ``auto``."""
    if tool_choice in (None, "auto"):
        return []
    if tool_choice == "required":
        if len(tools) != 1:
            raise ValueError(f"tool_choice 'required' is served only with exactly one tool (got "
                             f"{len(tools)}); name the function: {{'type': 'function', 'function': {{'name': ...}}}}")
        tool_choice = {"type": "function", "function": {"name": tools[0].name}}
    if tool_choice == "none":
        msg = Message("assistant", "", channel="final", end="<|return|>")
    elif isinstance(tool_choice, Mapping) and isinstance((tool_choice.get("function") or {}).get("name"), str):
        name = tool_choice["function"]["name"]
        if name not in {t.name for t in tools}:
            raise ValueError(f"tool_choice names {name!r}, which is not among the request's tools "
                             f"{[t.name for t in tools]}")
        msg = Message("assistant", "", channel="commentary", recipient=f"functions.{name}",
                      constrain="json", end="<|call|>")
    else:
        raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or "
                         f"{{'type': 'function', 'function': {{'name': str}}}}, got {tool_choice!r}")
    # The render of an empty message: generation prompt, header, <|message|>, end token.
    return codec.render(msg)[len(codec.generation_prompt):-1]


def _int_field(body: Mapping[str, Any], names: Sequence[str], default: int, lo: int, hi: int) -> int:
    for n in names:
        if body.get(n) is not None:
            v = body[n]
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{n} must be an integer in [{lo}, {hi}], got {v!r}")
            return v
    return default


def chat_completion(engine: Any, codec: HarmonyCodec, body: Any, *, model_name: str,
                    reasoning_effort: str = "low", max_tokens: int = 2048,
                    max_tokens_cap: int = 32768) -> dict[str, Any]:
    """Answer one chat completions request body (``agentgym.chat.chat_wire``); ``ValueError`` on a bad request.

    ``engine.generate(prompts, max_new_tokens=, temperature=, stop_ids=, seed=)`` samples;
    ``reasoning_effort`` is the default when the request names none; ``max_tokens`` the default
    completion budget.
    """
    if not isinstance(body, Mapping):
        raise ValueError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    for key, neutral in _NEUTRAL.items():
        if key in body and not neutral(body[key]):
            raise ValueError(f"{key}={body[key]!r} is not served: agentgym's server samples with plain "
                             f"temperature (log-probs equal the trainer's) and returns whole text "
                             f"responses; leave {key} out")
    effort = body.get("reasoning_effort") or reasoning_effort
    if effort not in REASONING_EFFORTS:
        raise ValueError(f"reasoning_effort must be one of {list(REASONING_EFFORTS)}, got {effort!r}")
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    if not 0.0 <= temperature <= 2.0:
        raise ValueError(f"temperature must be in [0, 2] (0 = greedy), got {temperature}")
    n = _int_field(body, ["n"], 1, 1, MAX_N)
    budget = _int_field(body, ["max_completion_tokens", "max_tokens"], max_tokens, 1, max_tokens_cap)
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    tools = tool_specs(body.get("tools") or [])
    prompt = render_conversation(codec, messages, tools, effort)
    forced = _forced_header(codec, body.get("tool_choice"), tools)
    samples = engine.generate([prompt + forced] * n, max_new_tokens=budget, temperature=temperature,
                              stop_ids=list(codec.stop_ids), seed=seed)
    choices = []
    for i, s in enumerate(samples):
        action = forced + list(s.tokens)
        msg = assistant_message(codec.parse(action), codec.tok.decode(action), f"call_{uuid.uuid4().hex[:24]}")
        reason = "tool_calls" if msg.get("tool_calls") else ("stop" if s.finish_reason == "stop" else "length")
        choice: dict[str, Any] = {"index": i, "message": msg, "finish_reason": reason, "logprobs": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"token": codec.tok.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(s.tokens, s.logprobs)]}
        if body.get("return_token_ids"):
            choice["token_ids"] = action
        choices.append(choice)
    completion = sum(len(forced) + len(s.tokens) for s in samples)
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model_name, "choices": choices,
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion,
                  "total_tokens": len(prompt) + completion},
    }
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = prompt
    return out
