"""WebAPI-v1 benchmarks: tool-call overhead against raw httpx, and oracle episodes per second.

    .venv/bin/python bench/webapi_bench.py [--calls 400] [--episodes 128] [--concurrency 1,8,64]

1. Round trip of one read (``GET /products/{id}``) three ways, interleaved in the same run
   against the same server and episode: a raw ``httpx.Client`` request (the baseline), the
   generated tool called directly (schema check + request + observation text), and a full
   ``env.step`` (parse the sampled tokens, dispatch the tool, render the observation tokens).
   Reported: median microseconds and the ratio to raw httpx.
2. Oracle episodes per second at 1, 8 and 64 concurrent episodes (threads, one shared
   server), each episode a reset + the plan's tool calls + the final answer + scoring.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import httpx
import numpy as np

import agentgym  # noqa: F401
from agentgym.environments.webapi.policies import oracle_action
from agentgym.environments.webapi.store_wire import EPISODE_HEADER
from agentgym.environments.webapi.tasks import all_tasks


def round_trip(calls: int, database_url: str | None) -> dict[str, float]:
    env = gym.make("agentgym/WebAPI-v1", split="all", max_turns=10**9, max_tokens=10**9, database_url=database_url)
    try:
        env.reset(seed=0)
        u: Any = env.unwrapped
        raw = httpx.Client(base_url=u.client.base_url)  # same keep-alive settings as the env's default
        headers = {EPISODE_HEADER: u.episode_key}
        tool = u._tools["get_product"]
        action = np.asarray(u.codec.tool_call_ids("get_product", {"product_id": 3}), dtype=np.int64)
        times: dict[str, list[float]] = {"raw_httpx": [], "tool": [], "env_step": []}
        for i in range(calls + 20):  # the first 20 rounds warm up connections and caches
            t0 = time.perf_counter()
            r = raw.get("/products/3", headers=headers)
            t1 = time.perf_counter()
            out = tool({"product_id": 3})
            t2 = time.perf_counter()
            _, _, term, trunc, info = env.step(action)
            t3 = time.perf_counter()
            assert r.status_code == 200 and out.ok and not (term or trunc) and info["tool_result"]["ok"]
            if i >= 20:
                times["raw_httpx"].append(t1 - t0)
                times["tool"].append(t2 - t1)
                times["env_step"].append(t3 - t2)
            if i % 200 == 199:  # keep the token stream short; resets are not timed
                env.reset(seed=i)
                headers = {EPISODE_HEADER: u.episode_key}
        raw.close()
        return {k: statistics.median(v) * 1e6 for k, v in times.items()}
    finally:
        env.close()


def episodes_per_second(concurrency: int, episodes: int, database_url: str | None) -> tuple[float, float]:
    tasks = all_tasks()
    envs = [gym.make("agentgym/WebAPI-v1", split="all", database_url=database_url) for _ in range(concurrency)]
    counter = iter(range(10**9))
    lock = threading.Lock()
    rewards: list[float] = []

    def worker(env: gym.Env) -> None:
        while True:
            with lock:
                n = next(counter)
            if n >= episodes:
                return
            env.reset(options={"task_id": tasks[(n * 7) % len(tasks)].id})
            total = 0.0
            while True:
                _, r, term, trunc, _ = env.step(oracle_action(env))
                total += float(r)
                if term or trunc:
                    break
            with lock:
                rewards.append(total)

    try:
        envs[0].reset(seed=0)  # start the shared server outside the timed region
        with ThreadPoolExecutor(concurrency) as ex:
            list(ex.map(lambda e: e.reset(seed=0), envs))
            t0 = time.perf_counter()
            list(ex.map(worker, envs))
            dt = time.perf_counter() - t0
    finally:
        for e in envs:
            e.close()
    return episodes / dt, float(np.mean(rewards))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--episodes", type=int, default=128, help="episodes per concurrency level")
    p.add_argument("--concurrency", default="1,8,64")
    p.add_argument("--database-url", default=None)
    args = p.parse_args()
    print(f"# WebAPI-v1 benchmark\n\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.system()}; database: "
          f"{'PostgreSQL' if args.database_url else 'SQLite (one file per episode)'}\n")
    rt = round_trip(args.calls, args.database_url)
    print(f"## Tool-call round trip (median of {args.calls}, GET /products/{{id}})\n")
    print("| path | median µs | vs raw httpx |\n|---|---:|---:|")
    for k in ("raw_httpx", "tool", "env_step"):
        print(f"| {k} | {rt[k]:.0f} | {rt[k] / rt['raw_httpx']:.2f}x |")
    print(f"\nenv overhead per call: {rt['env_step'] - rt['raw_httpx']:.0f} µs "
          f"({rt['env_step'] / rt['raw_httpx']:.2f}x raw httpx)\n")
    print(f"## Oracle episodes per second ({args.episodes} episodes per level, tasks cycled over all {len(all_tasks())})\n")
    print("| concurrent episodes | episodes/s | mean reward |\n|---:|---:|---:|")
    for c in (int(x) for x in args.concurrency.split(",")):
        eps, mean = episodes_per_second(c, max(args.episodes, c), args.database_url)
        print(f"| {c} | {eps:.1f} | {mean:.3f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
