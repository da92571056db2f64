"""Collection: many environments stepped concurrently against one rollout engine.

Each round, every episode still running contributes its full token stream as a prompt; the
engine samples all of them in one batched ``generate`` call (stopping at Harmony's
``<|call|>`` / ``<|return|>``), the pool steps the environments concurrently with the exact
sampled ids, and the engine's log-probs are attached to the trajectory of each env. The
next prompt is the trajectory's token stream itself: nothing is decoded and re-encoded.

Group sampling: ``seeds`` may repeat; the same seed gives the same task, so the samples of a
task form the group of the group baseline.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.errors import TrainerError
from agentgym.trajectory import Trajectory
from agentgym.vector import EnvPool

__all__ = ["Collector", "RolloutStats", "group_seeds"]


@dataclass
class RolloutStats:
    episodes: int
    rounds: int  # batched generate calls
    sampled_tokens: int
    env_seconds: float
    gen_seconds: float


def group_seeds(first_seed: int, tasks: int, samples_per_task: int) -> tuple[list[int], list[int]]:
    """Task seeds repeated ``samples_per_task`` times, and the group id of each episode."""
    seeds = [first_seed + t for t in range(tasks) for _ in range(samples_per_task)]
    groups = [t for t in range(tasks) for _ in range(samples_per_task)]
    return seeds, groups


class Collector:
    """Runs whole episodes of a fixed set of environments with an :class:`Engine`.

    ``envs``: the pool (one env per concurrent episode) or a factory + ``n``.
    ``max_new_tokens``: per turn (the env's action budget). The engine's stop ids are the
    codec's stop ids, read from the first env.
    """

    def __init__(self, pool: EnvPool, engine: Any, *, max_new_tokens: int) -> None:
        self.pool = pool
        self.engine = engine
        self.max_new_tokens = max_new_tokens
        codec = pool.envs[0].unwrapped.codec
        self.stop_ids: tuple[int, ...] = tuple(codec.stop_ids)

    @classmethod
    def from_factory(cls, factory: Callable[[], Any], n: int, engine: Any, *, max_new_tokens: int,
                     max_workers: int | None = None) -> Collector:
        return cls(EnvPool(factory, n=n, max_workers=max_workers), engine, max_new_tokens=max_new_tokens)

    def collect(self, seeds: Sequence[int], *, temperature: float, sample_seed: int | None,
                options: dict[str, Any] | None = None) -> tuple[list[Trajectory], RolloutStats]:
        """One episode per seed (``len(seeds) <= len(pool)``); returns the finished trajectories.

        ``sample_seed`` seeds the engine's sampler (round ``r`` uses ``sample_seed + r``), so a
        collection is reproducible given the weights.
        """
        import time

        n = len(seeds)
        if n > len(self.pool):
            raise TrainerError(f"{n} episodes asked of a pool of {len(self.pool)} envs; "
                               "build the pool with at least as many envs as episodes per step")
        envs = self.pool.envs[:n]
        t0 = time.perf_counter()
        if n == len(self.pool):  # concurrent resets (sandboxes, servers start in parallel)
            self.pool.reset(seeds, options=options)
        else:
            for i, s in enumerate(seeds):
                self.pool.reset_one(i, seed=s, options=options)
        env_s = time.perf_counter() - t0  # the prompts now sit in each env's trajectory
        gen_s = 0.0
        active = list(range(n))
        rounds = sampled = 0
        while active:
            prompts = [list(envs[i].unwrapped.trajectory.tokens) for i in active]
            t0 = time.perf_counter()
            samples = self.engine.generate(
                prompts, max_new_tokens=self.max_new_tokens, temperature=temperature,
                stop_ids=self.stop_ids,
                seed=None if sample_seed is None else sample_seed + rounds)
            gen_s += time.perf_counter() - t0
            if len(samples) != len(active):
                raise TrainerError(f"engine returned {len(samples)} samples for {len(active)} prompts")
            t0 = time.perf_counter()
            results = self.pool.step({i: np.asarray(s.tokens, dtype=np.int64)
                                      for i, s in zip(active, samples)})
            env_s += time.perf_counter() - t0
            still = []
            for i, s in zip(active, samples):
                traj = envs[i].unwrapped.trajectory
                turn = len(traj.turns) - 1
                t = traj.turns[turn]
                kept = t.action_end - t.action_start  # the env may clip or reject the action
                if kept:
                    if traj.tokens[t.action_start:t.action_end] != list(s.tokens[:kept]):
                        raise TrainerError("the env stored different action tokens than were "
                                           "sampled; the trajectory must hold the exact samples")
                    traj.set_action_logprobs(turn, s.logprobs[:kept])
                sampled += len(s.tokens)
                if not results[i].done:
                    still.append(i)
            active = still
            rounds += 1
        trajs = [copy.deepcopy(envs[i].unwrapped.trajectory) for i in range(n)]
        return trajs, RolloutStats(n, rounds, sampled, env_s, gen_s)

    def close(self) -> None:
        self.pool.close()
