"""Math-v1 episode throughput on one core, and the per-turn framework overhead.

    .venv/bin/python bench/math_throughput.py [--episodes 20000] [--profile]

An episode is ``reset(seed=i)`` + one oracle ``step`` (the reference answer as
``codec.final_ids``), offline ByteTokenizer, single thread, pinned to one CPU when the OS
allows. The framework overhead is measured by running the same loop with the environment's
own work replaced by precomputed results (no problem generation, no verification): what is
left is ToolEnv's reset/step (prompt assembly, action validation, Harmony parse, dispatch,
reward, trajectory record). ``--profile`` prints the cProfile top of the real loop.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from typing import Any

import numpy as np

from agentgym.env import Task
from agentgym.environments.math.env import MathEnv
from agentgym.environments.math.generators import FAMILIES, LEVELS, generate
from agentgym.environments.math.verify import verify
from agentgym.tools import ToolResult


class StubMathEnv(MathEnv):
    """Math-v1 with the env's own work precomputed: only the framework runs per episode."""

    def __init__(self, tasks: list[Task], **kw: Any) -> None:
        super().__init__(**kw)
        self._tasks, self._k = tasks, 0
        self._win = ToolResult("equivalent", terminal=True, outcome=1.0)

    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        self._k += 1
        return self._tasks[self._k % len(self._tasks)]

    def score_final(self, answer: str) -> ToolResult:
        return self._win


def run(env: MathEnv, n: int, actions: list[np.ndarray] | None = None) -> tuple[float, float, float]:
    """Seconds per episode, per reset, per step (oracle actions; precomputed when given)."""
    t_reset = t_step = 0.0
    clock = time.perf_counter
    codec = env.codec
    for i in range(n):
        t0 = clock()
        env.reset(seed=i)
        t1 = clock()
        a = actions[i % len(actions)] if actions is not None else \
            np.asarray(codec.final_ids(env.task.answer), dtype=np.int64)  # type: ignore[union-attr]
        t2 = clock()
        _, r, term, _, _ = env.step(a)
        t3 = clock()
        if r != 1.0 or not term:
            raise RuntimeError(f"oracle failed on seed {i}: {env.task}")
        t_reset += t1 - t0
        t_step += t3 - t2
    return (t_reset + t_step) / n, t_reset / n, t_step / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    n = args.episodes

    env = MathEnv()
    run(env, 500)  # warm-up: imports, mpmath context, prefix cache
    ep, rs, st = run(env, n)
    print(f"Math-v1, all families x levels, {n} episodes (reset + oracle step), one core:")
    print(f"  {1 / ep:,.0f} episodes/s   ({ep * 1e6:.1f} us/episode: reset {rs * 1e6:.1f} us, "
          f"oracle action + step {st * 1e6:.1f} us)")

    # Same tasks, same actions, env work precomputed: what the framework alone costs.
    rng = np.random.default_rng(0)
    probs = [generate(f, lv, rng) for _ in range(20) for f in FAMILIES for lv in LEVELS]
    tasks = [Task(p.id, p.question, p.answer) for p in probs]
    stub = StubMathEnv(tasks)
    actions = [np.asarray(stub.codec.final_ids(t.answer), dtype=np.int64) for t in tasks]
    # sample_task is called before anything else in reset, so task k+1 pairs with action k+1
    acts = actions[1:] + actions[:1]
    run(stub, 500, acts)
    stub._k = 0
    fep, frs, fst = run(stub, n, acts)
    print("Framework only (generation and verification precomputed, actions precomputed):")
    print(f"  {fep * 1e6:.1f} us/episode = reset {frs * 1e6:.1f} us + step {fst * 1e6:.1f} us")
    print(f"  per-turn framework overhead (step: validate + Harmony parse + dispatch + reward + record): "
          f"{fst * 1e6:.1f} us")

    # The env's own work, measured directly.
    clock = time.perf_counter
    t = clock()
    for i in range(n):
        generate(probs[i % len(probs)].family, probs[i % len(probs)].level, rng)
    gen = (clock() - t) / n
    t = clock()
    for i in range(n):
        p = probs[i % len(probs)]
        verify(p.answer, p.answer)
    ver = (clock() - t) / n
    t = clock()
    for i in range(n):
        stub.codec.final_ids(tasks[i % len(tasks)].answer)
    fin = (clock() - t) / n
    print(f"Env work: generate {gen * 1e6:.1f} us, verify (oracle answer) {ver * 1e6:.2f} us, "
          f"oracle final_ids {fin * 1e6:.1f} us")

    print("Per family (episodes/s):")
    for fam in FAMILIES:
        e = MathEnv(families=[fam])
        run(e, 100)
        fe, _, _ = run(e, max(n // 10, 500))
        print(f"  {fam:22} {1 / fe:8,.0f}")

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(env, min(n, 20_000))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
