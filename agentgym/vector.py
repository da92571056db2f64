"""Concurrent stepping of many environments.

Tool calls block on I/O (a sandbox, an HTTP server), so a thread pool steps many
environments at once while the GIL is released. This is the API the trainer's collector
uses: reset a batch, then repeatedly step whichever environments have an action ready.

    pool = EnvPool([gym.make("agentgym/Math-v0") for _ in range(8)])
    first = pool.reset(seeds=range(8))            # list of (obs, info)
    results = pool.step({0: action0, 3: action3})  # {index: StepResult}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["EnvPool", "StepResult"]


@dataclass(slots=True)
class StepResult:
    obs: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class EnvPool:
    """A fixed set of environments stepped concurrently by a thread pool."""

    def __init__(self, envs: Sequence[gym.Env] | Callable[[], gym.Env], n: int | None = None,
                 max_workers: int | None = None) -> None:
        if callable(envs):
            if n is None:
                raise ValueError("EnvPool(factory, n=...) needs n when given a factory")
            envs = [envs() for _ in range(n)]
        self.envs = list(envs)
        self._pool = ThreadPoolExecutor(max_workers or min(64, len(self.envs)),
                                        thread_name_prefix="agentgym-env")

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds: Iterable[int | None] | None = None,
              options: dict[str, Any] | None = None) -> list[tuple[np.ndarray, dict[str, Any]]]:
        seeds = list(seeds) if seeds is not None else [None] * len(self.envs)
        futs = [self._pool.submit(e.reset, seed=s, options=options) for e, s in zip(self.envs, seeds)]
        return [f.result() for f in futs]

    def reset_one(self, i: int, seed: int | None = None, options: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, dict[str, Any]]:
        return self.envs[i].reset(seed=seed, options=options)

    def step(self, actions: Mapping[int, Any]) -> dict[int, StepResult]:
        """Step the environments named in ``actions`` concurrently."""
        futs = {i: self._pool.submit(self.envs[i].step, a) for i, a in actions.items()}
        out = {}
        for i, f in futs.items():
            obs, reward, terminated, truncated, info = f.result()
            out[i] = StepResult(obs, float(reward), terminated, truncated, info)
        return out

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
