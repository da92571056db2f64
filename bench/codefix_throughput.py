"""CodeFix-v1 episodes per minute with the oracle policy, N concurrent episodes, real Docker.

    .venv/bin/python bench/codefix_throughput.py [--concurrency 8] [--episodes 96] [--pool-size 8]
                                                 [--backend docker|bwrap]

An episode is ``reset`` (a fresh container from the warm pool, solution.py and
test_visible.py written) + the oracle's two steps (``write_file`` of the canonical
solution, then ``submit``: the hidden-test judge runs in the container). Episodes run
through :class:`agentgym.EnvPool` (threads); a finished environment is reset at once with
the next seed, so ``concurrency`` episodes are always in flight. The clock starts after
``pool-size`` warm-up episodes (steady state: every container used was started during the
run). The same run measures concurrency 1 first, for the speed-up ratio. Every episode must
score 1.0 or the run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from typing import Any

import gymnasium as gym

import agentgym
from agentgym.environments.codefix.oracle import oracle_policy
from agentgym.sandboxes.docker_backend import SandboxPool


def run(concurrency: int, episodes: int, sandbox: Any, level: int | None, warmup: int
        ) -> dict[str, Any]:
    """Steady state: the clock starts once ``warmup`` episodes have finished, so the
    containers the pool started before the run do not flatter the result."""
    envs = [gym.make("agentgym/CodeFix-v1", split="train", level=level,
                     sandbox=sandbox) for _ in range(concurrency)]
    resets: list[float] = []
    lengths: list[float] = []
    with agentgym.EnvPool(envs) as ep:
        seeds = iter(range(10**6))
        t0 = time.perf_counter()
        started = {}
        for i in range(concurrency):
            t = time.perf_counter()
            ep.reset_one(i, seed=next(seeds))
            resets.append(time.perf_counter() - t)
            started[i] = t
        done = 0
        cpu0 = own0 = 0.0
        active = set(range(concurrency))
        total = episodes + warmup
        while active:
            results = ep.step({i: oracle_policy(ep.envs[i]) for i in active})
            for i, res in results.items():
                if not res.done:
                    continue
                if res.info["reward_components"]["outcome"] != 1.0:
                    raise SystemExit(f"oracle episode failed: {res.info.get('judge')}")
                done += 1
                if done == warmup:
                    t0, cpu0, own0 = time.perf_counter(), _all_cpu_s(), time.process_time()
                if done > warmup:
                    lengths.append(time.perf_counter() - started[i])
                if done + len(active) - 1 < total:
                    t = time.perf_counter()
                    ep.reset_one(i, seed=next(seeds))
                    resets.append(time.perf_counter() - t)
                    started[i] = t
                else:
                    active.discard(i)
        wall = time.perf_counter() - t0
        cpu = _all_cpu_s() - cpu0
        own = time.process_time() - own0
    return {"concurrency": concurrency, "episodes": done - warmup, "wall_s": wall,
            "episodes_per_min": 60 * (done - warmup) / wall,
            "episode_s_p50": statistics.median(lengths),
            "reset_s_p50": statistics.median(resets),
            "host_cpu_per_ep": own / max(1, done - warmup),
            "machine_cpu_per_ep": cpu / max(1, done - warmup)}


def _all_cpu_s() -> float:
    """Busy CPU seconds of the whole machine (other jobs included)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=96)
    ap.add_argument("--pool-size", type=int, default=8, help="warm containers kept ready")
    ap.add_argument("--level", type=int, default=None)
    ap.add_argument("--backend", choices=("docker", "bwrap"), default="docker")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        sandbox: Any = args.backend
        if args.backend == "docker":
            pool = stack.enter_context(SandboxPool(size=args.pool_size))
            sandbox = lambda: pool.acquire()  # noqa: E731
            time.sleep(3)  # let the pool fill before the warm-up episodes
        rows = [run(1, max(16, args.episodes // 4), sandbox, args.level, args.pool_size),
                run(args.concurrency, args.episodes, sandbox, args.level, args.pool_size)]
    print(f"backend: {args.backend}" + (f", warm pool of {args.pool_size}" if args.backend == "docker" else ""))
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, python {sys.version.split()[0]}")
    print("| concurrency | episodes | wall s | episodes/min | episode p50 s | reset p50 s "
          "| CPU s/episode: this process | whole machine (other jobs included) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['episodes']} | {r['wall_s']:.1f} | {r['episodes_per_min']:.0f} "
              f"| {r['episode_s_p50']:.2f} | {r['reset_s_p50']:.3f} | {r['host_cpu_per_ep']:.3f} "
              f"| {r['machine_cpu_per_ep']:.3f} |")
    print(f"speed-up of {args.concurrency} concurrent over 1: "
          f"{rows[1]['episodes_per_min'] / rows[0]['episodes_per_min']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
