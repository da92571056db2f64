"""Wire format of OpenAI chat completions, shared by :class:`OpenAIChatPolicy` and agentgym's server.

request ``POST {base_url}/chat/completions`` (``base_url`` ends in ``/v1``, as the openai SDK's)::

    {"model": str, "messages": [...], "tools": [{"type": "function", "function": {...}}],
     "tool_choice": "auto" | "none" | "required" | {"type": "function", "function": {"name": str}},
     "parallel_tool_calls": false, "temperature": float, "top_p": float, "max_tokens": int,
     "seed": int, "reasoning_effort": "low" | "medium" | "high",
     "logprobs": true, "return_token_ids": true}          # the last two: optional extensions

response::

    {"choices": [{"index": 0, "finish_reason": "stop" | "tool_calls" | "length",
                  "message": {"role": "assistant", "content": str | null,
                              "reasoning_content": str,                  # vLLM's reasoning field
                              "tool_calls": [{"id": str, "type": "function",
                                              "function": {"name": str, "arguments": str}}]},
                  "token_ids": [int, ...],                                # with return_token_ids
                  "logprobs": {"content": [{"token": str, "logprob": float}, ...]}}],
     "prompt_token_ids": [int, ...],                                      # with return_token_ids
     "usage": {"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}}

``return_token_ids`` is vLLM's extension (>= 0.10.2) that agentgym's server also speaks:
``prompt_token_ids`` is the rendered conversation up to and including the generation prompt,
``token_ids`` the assistant's action after it (a header forced by ``tool_choice`` included),
``logprobs.content`` one entry per *sampled* token, i.e. the last ``len(content)`` ids of
``token_ids``. vLLM and others also use ``reasoning`` for ``reasoning_content``; both are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ServiceError

__all__ = ["CHAT_PATH", "ChatReply", "chat_request", "parse_chat_response"]

CHAT_PATH = "/v1/chat/completions"


@dataclass(slots=True)
class ChatReply:
    """The first choice of a chat completion, as the client uses it."""

    message: dict[str, Any]
    finish_reason: str
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: dict[str, Any] = field(default_factory=dict)


def chat_request(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                 sampling: dict[str, Any], token_ids: bool) -> dict[str, Any]:
    """The JSON body of one chat completion (module doc). ``sampling`` holds the settings the
    caller chose (unset ones are left out, so strict providers see only what they support)."""
    body: dict[str, Any] = {"model": model, "messages": messages, **sampling}
    if tools:
        body["tools"] = tools
    else:  # a provider may refuse tool_choice / parallel_tool_calls without tools
        body.pop("tool_choice", None)
        body.pop("parallel_tool_calls", None)
    if token_ids:
        body["return_token_ids"] = True
        body["logprobs"] = True
    return body


def _int_list(x: Any, what: str) -> list[int] | None:
    if x is None:
        return None
    if not isinstance(x, list) or not all(isinstance(t, int) for t in x):
        raise ServiceError(f"{what} must be a list of token ids, got {type(x).__name__}")
    return list(x)


def parse_chat_response(body: Any) -> ChatReply:
    """The first choice of a chat completions response body; ``ServiceError`` if it has none."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ServiceError(f"expected a chat completion with choices[0], got {str(body)[:300]}")
    ch = choices[0]
    msg = ch.get("message")
    if not isinstance(msg, dict):
        raise ServiceError(f"choices[0].message is missing in the chat completion: {str(ch)[:300]}")
    lps = None
    content = (ch.get("logprobs") or {}).get("content") if isinstance(ch.get("logprobs"), dict) else None
    if isinstance(content, list):
        lps = [float(e["logprob"]) for e in content if isinstance(e, dict) and "logprob" in e]
    return ChatReply(
        message=msg,
        finish_reason=str(ch.get("finish_reason") or ""),
        prompt_token_ids=_int_list(body.get("prompt_token_ids"), "prompt_token_ids"),
        token_ids=_int_list(ch.get("token_ids"), "choices[0].token_ids"),
        logprobs=lps,
        usage=dict(body.get("usage") or {}),
    )
