"""Wrappers on top of the token contract.

``TextWrapper`` lets an API model drive an environment with strings: observations come back
as decoded Harmony text, actions are Harmony text (``<|channel|>final<|message|>42<|return|>``)
encoded with special-token strings mapped to their ids. It is built on the token API, never
beside it: the trajectory record is still the token stream.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.tokenizers import encode_harmony_text

__all__ = ["TextWrapper"]


class TextWrapper(gym.Wrapper):  # type: ignore[type-arg]  # str in/out over an ndarray env
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.tokenizer = env.unwrapped.tokenizer  # type: ignore[attr-defined]
        self.observation_space = gym.spaces.Text(1 << 20)
        self.action_space = gym.spaces.Text(1 << 20)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self.tokenizer.decode(obs.tolist()), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ids = np.asarray(encode_harmony_text(self.tokenizer, action), dtype=np.int64)
        obs, reward, terminated, truncated, info = self.env.step(ids)
        return self.tokenizer.decode(obs.tolist()), float(reward), terminated, truncated, info
