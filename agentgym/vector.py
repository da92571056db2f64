"""Concurrent stepping of many environments.

Tool calls block on I/O (a sandbox, an HTTP server), so a thread pool steps many
environments at once while the GIL is released. This is the API the trainer's collector
uses: reset a batch, then repeatedly step whichever environments have an action ready.

    pool = EnvPool([gym.make("agentgym/Math-v1") for _ in range(8)])
    first = pool.reset(seeds=range(8))            # list of (obs, info)
    results = pool.step({0: action0, 3: action3})  # {index: StepResult}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.errors import ConfigError, PoolStepError

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
                raise ConfigError("EnvPool(factory, n=...) needs n when given a factory")
            envs = [envs() for _ in range(n)]
        self.envs = list(envs)
        self._pool = ThreadPoolExecutor(max_workers or min(64, len(self.envs)),
                                        thread_name_prefix="agentgym-env")

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds: Iterable[int | None] | None = None,
              options: dict[str, Any] | None = None) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Reset every environment, concurrently: one seed per environment (or none at all)."""
        seeds = list(seeds) if seeds is not None else [None] * len(self.envs)
        if len(seeds) != len(self.envs):
            raise ConfigError(f"reset got {len(seeds)} seeds for {len(self.envs)} environments; pass one "
                              "seed per environment, or use reset_one(i, seed) for a single one")
        done, errors = self._gather({i: self._pool.submit(e.reset, seed=s, options=options)
                                     for i, (e, s) in enumerate(zip(self.envs, seeds))})
        if errors:
            raise PoolStepError(done, errors, len(self.envs)) from next(iter(errors.values()))
        return [done[i] for i in range(len(self.envs))]

    def reset_one(self, i: int, seed: int | None = None, options: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, dict[str, Any]]:
        return self.envs[i].reset(seed=seed, options=options)

    def step(self, actions: Mapping[int, Any]) -> dict[int, StepResult]:
        """Step the environments named in ``actions`` concurrently.

        If some raise, the others' steps still count: :class:`PoolStepError` carries their
        results (``.results``) and the exceptions (``.errors``).
        """
        done, errors = self._gather({i: self._pool.submit(self.envs[i].step, a) for i, a in actions.items()})
        results = {i: StepResult(obs, float(reward), terminated, truncated, info)
                   for i, (obs, reward, terminated, truncated, info) in done.items()}
        if errors:
            raise PoolStepError(results, errors, len(actions)) from next(iter(errors.values()))
        return results

    @staticmethod
    def _gather(futs: dict[int, Future[Any]]) -> tuple[dict[int, Any], dict[int, BaseException]]:
        """Wait for every future: (results of those that returned, exceptions of those that raised)."""
        results: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        for i, f in futs.items():
            exc = f.exception()
            if exc is None:
                results[i] = f.result()
            else:
                errors[i] = exc
        return results, errors

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
