"""Wrappers on top of the token contract.

``TextWrapper`` lets an API model drive an environment with strings: observations come back
as decoded Harmony text, actions are Harmony text (``<|channel|>final<|message|>42<|return|>``)
encoded with special-token strings mapped to their ids. It is built on the token API, never
beside it: the trajectory record is still the token stream (of the action as repaired).

It forgives what API models commonly write, and says so in ``info["repairs"]`` (counted per
episode in ``info["repair_counts"]``) instead of producing a cascade of parse errors:

* ``leading_start``: the action repeats the generation prompt ``<|start|>assistant``: dropped.
* ``plain_text``: no Harmony token at all: read as the final answer
  (``<|channel|>final<|message|>TEXT<|return|>``) and scored as one.
* ``missing_stop``: a tool call or final answer cut off before its stop token: the stop
  (``<|call|>`` / ``<|return|>``) is appended.
* ``end_as_stop``: a tool call or final answer closed with ``<|end|>``: replaced by its stop.
* ``trailing_whitespace``: whitespace after the stop token: dropped.

For OpenAI-style messages and tool calls instead of Harmony text, see
:class:`agentgym.chat.ChatWrapper`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.errors import ActionTypeError
from agentgym.tokenizers import HARMONY_SPECIALS, encode_harmony_text

__all__ = ["HarmonyText", "TextWrapper"]

_LEADING_START = re.compile(r"^\s*<\|start\|>\s*assistant")
_TRAILING_WS = re.compile(r"(<\|call\|>|<\|return\|>)\s+$")
_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


class HarmonyText(gym.spaces.Text):
    """Any string up to ``max_length`` characters (unicode and Harmony tokens included).

    ``gymnasium.spaces.Text`` only holds strings over a fixed charset; text from models and
    tools holds anything. ``sample`` draws short printable strings (at most 64 characters).
    """

    def __init__(self, max_length: int = 1 << 24, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=0, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(1, 65))
        return "".join(self.np_random.choice(list(_SAMPLE_CHARS), size=n))

    def __repr__(self) -> str:
        return f"HarmonyText(max_length={self.max_length})"


class TextWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):  # type: ignore[type-arg]  # str in/out over an ndarray env
    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)  # so env.spec can re-make the wrapped env
        gym.Wrapper.__init__(self, env)
        self.tokenizer = env.unwrapped.tokenizer  # type: ignore[attr-defined]
        self.codec = env.unwrapped.codec  # type: ignore[attr-defined]
        self.observation_space = HarmonyText()
        self.action_space = HarmonyText()
        self.repair_counts: Counter[str] = Counter()
        self._special_ids = {self.tokenizer.special_id(s) for s in HARMONY_SPECIALS}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.repair_counts = Counter()
        return self.tokenizer.decode(obs.tolist()), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
        if not isinstance(action, str):  # the program's mistake, not the model's: say so at once
            hint = ("; for chat messages use agentgym.ChatWrapper" if isinstance(action, (dict, list))
                    else "; for token ids step the unwrapped env" if isinstance(action, np.ndarray) else "")
            raise ActionTypeError(f"TextWrapper.step() takes a str of Harmony text (or plain text), got "
                                  f"{type(action).__name__}{hint}")
        ids, repairs = self.repair(action)
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(ids, dtype=np.int64))
        self.repair_counts.update(repairs)
        info = {**info, "repairs": repairs}
        info["repair_counts"] = dict(self.repair_counts)
        return self.tokenizer.decode(obs.tolist()), float(reward), terminated, truncated, info

    def repair(self, text: str) -> tuple[list[int], list[str]]:
        """The action ids for ``text`` and the repairs made (module doc), in order."""
        repairs: list[str] = []
        m = _LEADING_START.match(text)
        if m:
            text = text[m.end():]
            repairs.append("leading_start")
        if not any(s in text for s in HARMONY_SPECIALS):
            repairs.append("plain_text")
            return self.codec.final_ids(text), repairs
        stripped = _TRAILING_WS.sub(r"\1", text)
        if stripped != text:
            text = stripped
            repairs.append("trailing_whitespace")
        ids = encode_harmony_text(self.tokenizer, text)
        parsed = self.codec.parse(ids)
        if parsed.stop is None and parsed.messages and ids:
            last = parsed.messages[-1]
            stop = (self.codec.CALL if (last.recipient or "").startswith("functions.")
                    else self.codec.RETURN if last.channel == "final" else None)
            if stop is not None and ids[-1] == self.codec.END:
                ids[-1] = stop
                repairs.append("end_as_stop")
            elif stop is not None and ids[-1] not in self._special_ids:  # content ran to the end
                ids.append(stop)
                repairs.append("missing_stop")
        return ids, repairs
