"""An engine that answers each prompt with the action recorded for it: collection without a model.

    engine = ReplayEngine.from_oracle(make_env, seeds=range(64), options={"split": "train"})

``from_oracle`` plays each seed's scripted oracle (``agentgym.oracles``) on a local env and
records, for every turn, the token stream the policy saw (the prompt) and the action it took.
``generate`` then returns that action for a recorded prompt, and a short malformed final answer
for any other, so every episode ends. Each row depends on its own prompt only (never on the
batch or the seed), so two collectors that see the same prompts return identical records: the
tests compare the Ray collector with the local one this way, and ``bench/scale_bench.py``
measures collection throughput with a policy that costs nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .base import EngineAbilities, Sample

__all__ = ["ReplayEngine"]


def _key(prompt: Sequence[int]) -> bytes:
    return hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=16).digest()


class ReplayEngine:
    """Answers each prompt with the action recorded for it (``from_oracle``), log-prob 0."""

    abilities = EngineAbilities()  # scripted actions: no model, nothing to sleep

    def __init__(self, table: dict[bytes, list[int]], fallback: list[int]) -> None:
        self.table = table  # prompt digest -> action ids
        self.fallback = fallback  # answer for unknown prompts: ends the episode
        self.calls = 0

    @classmethod
    def from_oracle(cls, make_env: Callable[[], Any], seeds: Iterable[int],
                    options: dict[str, Any] | None = None) -> ReplayEngine:
        from agentgym.oracles import get_oracle

        env = make_env()
        try:
            inner = env.unwrapped
            oracle = get_oracle(inner.env_id)
            table: dict[bytes, list[int]] = {}
            for seed in seeds:
                env.reset(seed=seed, options=options)
                done = False
                while not done:
                    action = np.asarray(oracle(env), dtype=np.int64).tolist()
                    table[_key(inner.trajectory.tokens)] = action
                    _, _, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.int64))
                    done = terminated or truncated
            fallback = list(inner.codec.final_ids("?"))
        finally:
            env.close()
        return cls(table, fallback)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 stop_ids: Sequence[int], seed: int | None = None) -> list[Sample]:
        self.calls += 1
        out = []
        for p in prompts:
            action = self.table.get(_key(p), self.fallback)[:max_new_tokens]
            # Log-prob 0: the scripted policy takes its action with probability 1.
            out.append(Sample(list(action), [0.0] * len(action), "stop"))
        return out

    def sync_weights(self, model: Any) -> None:
        """Nothing to sync: the actions are fixed."""

    def close(self) -> None:
        pass
