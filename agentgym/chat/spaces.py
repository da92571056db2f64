"""Gymnasium spaces for chat: a list of OpenAI-style messages, and one assistant message.

``contains`` checks the shape an OpenAI-compatible API accepts; ``sample`` draws short random
messages (a final answer or a call to one of ``tool_names``) from the space's own seeded RNG,
which is what ``check_env`` steps with.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.chat.messages import ROLES

__all__ = ["AssistantMessageSpace", "ChatMessagesSpace"]

_CHARS = np.array(list(string.ascii_letters + string.digits + string.punctuation + " "))


def _is_content(x: Any) -> bool:
    return x is None or isinstance(x, str) or (
        isinstance(x, list) and all(isinstance(p, Mapping) and isinstance(p.get("text", ""), str) for p in x))


def _is_call(c: Any) -> bool:
    fn = c.get("function") if isinstance(c, Mapping) else None
    return isinstance(fn, Mapping) and isinstance(fn.get("name"), str) and isinstance(fn.get("arguments"), str)


def _is_assistant(m: Any) -> bool:
    if not isinstance(m, Mapping) or m.get("role", "assistant") != "assistant" or not _is_content(m.get("content")):
        return False
    calls = m.get("tool_calls") or []
    return isinstance(calls, list) and all(_is_call(c) for c in calls)


def _random_text(rng: np.random.Generator, n_max: int = 24) -> str:
    return "".join(rng.choice(_CHARS, size=int(rng.integers(1, n_max + 1))))


class AssistantMessageSpace(gym.spaces.Space[dict[str, Any]]):
    """One assistant message: ``{"role": "assistant", "content": str | None, "tool_calls": [...]}``."""

    def __init__(self, tool_names: Sequence[str] = (), seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)
        self.tool_names = list(tool_names)

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        rng = self.np_random
        if self.tool_names and rng.random() < 0.5:
            name = str(rng.choice(self.tool_names))
            args = json.dumps({"x": _random_text(rng, 8)})
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}
        return {"role": "assistant", "content": _random_text(rng)}

    def contains(self, x: Any) -> bool:
        return _is_assistant(x)

    def __repr__(self) -> str:
        return f"AssistantMessageSpace(tool_names={self.tool_names})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantMessageSpace) and other.tool_names == self.tool_names


class ChatMessagesSpace(gym.spaces.Space[list[dict[str, Any]]]):
    """A list of chat messages, each ``{"role": one of ROLES, "content": ..., ...}``."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        return [{"role": "user", "content": _random_text(self.np_random)}]

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list):
            return False
        for m in x:
            if not isinstance(m, Mapping) or m.get("role") not in ROLES or not _is_content(m.get("content")):
                return False
            if m["role"] == "assistant" and not _is_assistant(m):
                return False
            if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
                return False
        return True

    def __repr__(self) -> str:
        return "ChatMessagesSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatMessagesSpace)
