"""Scale-out benchmarks: Ray collection throughput, remote step overhead, sessions per server.

    .venv/bin/python bench/scale_bench.py collect   # episodes/s, env steps/s: local vs 1/2/4 Ray workers
    .venv/bin/python bench/scale_bench.py step      # remote (WebSocket, HTTP) vs local env.step, µs
    .venv/bin/python bench/scale_bench.py sessions  # concurrent sessions one `agentgym serve env` holds
    .venv/bin/python bench/scale_bench.py all

``collect`` plays each env's scripted oracle through :class:`ReplayEngine` (a policy that costs
nothing), so the numbers are the collection machinery and the environments themselves: the
single-process ``Collector`` (one env per episode, stepped on threads) against ``RayCollector``
with 1, 2 and 4 workers on a local Ray instance, timed after a warm-up call (worker start-up
excluded, reported apart). Every line prints the load average next to it: on a shared machine
absolute numbers move with the load; the ratios come from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

import agentgym  # noqa: F401


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f}"


# ---------------------------------------------------------------------------- collection
def _steps(trajs: list[Any]) -> int:
    return sum(len(t.turns) for t in trajs)


def bench_collect(env_id: str, episodes: int, workers: list[int], per_call: int, env_kwargs: dict[str, Any],
                  cpus: float) -> list[dict[str, Any]]:
    import functools

    import ray

    from agentgym.trainer.rollout.collector import Collector
    from agentgym.trainer.rollout.engines.replay import ReplayEngine
    from agentgym.trainer.rollout.ray_collector import RayCollector, WorkerSpec

    make_env = functools.partial(gym.make, env_id, **env_kwargs)
    seeds = list(range(episodes))
    t0 = time.perf_counter()
    engine = ReplayEngine.from_oracle(make_env, seeds)
    print(f"# {env_id}: recorded the oracle of {episodes} seeds in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    local = Collector.from_factory(make_env, episodes, engine, max_new_tokens=4096)
    local.collect(seeds[: min(8, episodes)], temperature=1.0, sample_seed=0)  # warm-up (pools, imports)
    t0 = time.perf_counter()
    trajs = [e.traj for e in local.collect(seeds, temperature=1.0, sample_seed=0)[0]]
    dt = time.perf_counter() - t0
    local.close()
    reward = statistics.mean(t.total_reward for t in trajs)
    rows.append({"env": env_id, "collector": "local (threads)", "episodes": episodes, "seconds": dt,
                 "episodes_s": episodes / dt, "steps_s": _steps(trajs) / dt, "reward": reward, "load": load()})
    print(json.dumps(rows[-1]), flush=True)
    ray.init(num_cpus=os.cpu_count() or 2, object_store_memory=400 * 2**20, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        for n in workers:
            t0 = time.perf_counter()
            col = RayCollector(WorkerSpec(make_env, lambda _m, e=engine: e, max_new_tokens=4096),
                               num_workers=n, episodes_per_call=per_call, env_id=env_id, cpus_per_worker=cpus / n)
            col.collect(seeds[: n * per_call], temperature=1.0, sample_seed=0)  # starts every worker
            start = time.perf_counter() - t0
            t0 = time.perf_counter()
            trajs = [e.traj for e in col.collect(seeds, temperature=1.0, sample_seed=0)[0]]
            dt = time.perf_counter() - t0
            col.close()
            rows.append({"env": env_id, "collector": f"ray x{n}", "episodes": episodes, "seconds": dt,
                         "episodes_s": episodes / dt, "steps_s": _steps(trajs) / dt,
                         "reward": statistics.mean(t.total_reward for t in trajs), "startup_s": start,
                         "load": load()})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        ray.shutdown()
    return rows


# ---------------------------------------------------------------------------- step overhead
def _serve(env_id: str, *args: str) -> Any:
    from agentgym.serving.env_launch import launch

    return launch(env_id, *args)


def bench_step(n: int) -> list[dict[str, Any]]:
    """Per-step time of the same actions on a local env and through Remote-v0 (WS and HTTP)."""
    from agentgym.oracles import get_oracle

    env_id = "agentgym/MathCalc-v1"
    server = _serve(env_id)
    rows: list[dict[str, Any]] = []
    try:
        # Oracle episodes (tool call + final answer): record the actions once, replay them.
        local = gym.make(env_id)
        oracle = get_oracle(env_id)
        episodes = []
        for seed in range(n):
            local.reset(seed=seed)
            acts, done = [], False
            while not done:
                a = oracle(local)
                acts.append(a)
                done = any(local.step(a)[2:4])
            episodes.append((seed, acts))
        envs = {"local": local,
                "remote ws": gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id),
                "remote http": gym.make("agentgym/Remote-v0", url=server.http_url, env_id=env_id)}
        for name, env in envs.items():
            step_t: list[float] = []
            reset_t: list[float] = []
            for _ in range(2):  # second pass is timed
                step_t, reset_t = [], []
                for seed, acts in episodes:
                    t0 = time.perf_counter()
                    env.reset(seed=seed)
                    reset_t.append(time.perf_counter() - t0)
                    for a in acts:
                        t0 = time.perf_counter()
                        env.step(a)
                        step_t.append(time.perf_counter() - t0)
            rows.append({"env": name, "step_us_median": 1e6 * statistics.median(step_t),
                         "step_us_p90": 1e6 * float(np.percentile(step_t, 90)),
                         "reset_us_median": 1e6 * statistics.median(reset_t), "steps": len(step_t),
                         "load": load()})
            print(json.dumps(rows[-1]), flush=True)
        base = rows[0]["step_us_median"]
        for r in rows[1:]:
            r["overhead_us"] = r["step_us_median"] - base
            print(f"# {r['env']}: +{r['overhead_us']:.0f} µs per step over local ({r['step_us_median'] / base:.1f}x)")
        for env in envs.values():
            env.close()
    finally:
        server.stop()
    return rows


# ---------------------------------------------------------------------------- sessions
async def _open_sessions(url: str, env_id: str, n: int, batch: int) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    from agentgym.serving import env_wire
    from agentgym.tokenizers import ByteTokenizer

    tok = {"name": ByteTokenizer.name, "vocab_size": ByteTokenizer().vocab_size}
    hello = env_wire.encode({"op": "hello", "protocol": env_wire.PROTOCOL, "env_id": env_id, "kwargs": {},
                         "tokenizer": tok})
    conns: list[Any] = []
    failures: list[str] = []

    async def one(i: int) -> None:
        try:
            ws = await connect(url, open_timeout=60, max_size=None, compression=None, ping_interval=None)
            await ws.send(hello)
            if not json.loads(await ws.recv())["ok"]:
                raise RuntimeError("hello refused")
            await ws.send(env_wire.encode({"op": "reset", "seq": 1, "seed": i}))
            if not json.loads(await ws.recv())["ok"]:
                raise RuntimeError("reset failed")
            conns.append(ws)
        except Exception as e:  # counted, not raised: the point is how many succeed
            failures.append(repr(e)[:120])

    t0 = time.perf_counter()
    for start in range(0, n, batch):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + batch))))
    opened = time.perf_counter() - t0
    # Every session steps once, all at the same time.
    t0 = time.perf_counter()

    async def step(ws: Any) -> bool:
        await ws.send(env_wire.encode({"op": "step", "seq": 2, "action": [1, 2, 3]}))
        return bool(json.loads(await ws.recv())["ok"])

    ok = await asyncio.gather(*(step(ws) for ws in conns), return_exceptions=True)
    stepped = time.perf_counter() - t0
    out = {"asked": n, "held": len(conns), "failed": len(failures), "stepped_ok": sum(x is True for x in ok),
           "open_s": opened, "step_all_s": stepped, "first_failure": failures[0] if failures else None}
    await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    return out


def bench_sessions(counts: list[int], env_id: str) -> list[dict[str, Any]]:
    import psutil

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # the server inherits it
    rows = []
    for n in counts:
        cap = str(max(counts) * 2)  # every session comes from this one client address
        server = _serve(env_id, "--max-sessions", cap, "--max-client-sessions", cap, "--detach-grace", "5")
        try:
            proc = psutil.Process(server.proc.pid)
            rss0 = proc.memory_info().rss
            r = asyncio.run(_open_sessions(server.url, env_id, n, batch=256))
            r.update(env=env_id, server_rss_mib=(proc.memory_info().rss) / 2**20,
                     rss_per_session_kib=(proc.memory_info().rss - rss0) / 1024 / max(1, r["held"]), load=load())
            rows.append(r)
            print(json.dumps(r), flush=True)
        finally:
            server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["collect", "step", "sessions", "all"])
    p.add_argument("--math-episodes", type=int, default=256)
    p.add_argument("--codefix-episodes", type=int, default=32)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--per-call", type=int, default=8, help="episodes per Ray call (unit)")
    p.add_argument("--ray-cpus", type=float, default=2.0, help="CPUs the Ray workers share")
    p.add_argument("--step-episodes", type=int, default=200)
    p.add_argument("--sessions", default="256,1024,2048")
    p.add_argument("--skip-codefix", action="store_true")
    args = p.parse_args(argv)
    print(f"# scale_bench {args.what} | {load()} | cpus {os.cpu_count()}", flush=True)
    workers = [int(x) for x in args.workers.split(",")]
    if args.what in ("collect", "all"):
        bench_collect("agentgym/MathCalc-v1", args.math_episodes, workers, args.per_call, {}, args.ray_cpus)
        if not args.skip_codefix:
            bench_collect("agentgym/CodeFix-v1", args.codefix_episodes, workers, min(args.per_call, 4), {},
                          args.ray_cpus)
    if args.what in ("step", "all"):
        bench_step(args.step_episodes)
    if args.what in ("sessions", "all"):
        bench_sessions([int(x) for x in args.sessions.split(",")], "agentgym/MathCalc-v1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
