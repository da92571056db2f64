"""Load: 64 concurrent episodes against one server, no leakage between them, no lost writes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import httpx

from agentgym import EnvPool
from agentgym.environments.webapi.policies import oracle_action
from agentgym.environments.webapi.tasks import all_tasks, goal_state

N = 64


def test_64_concurrent_episodes_on_one_server() -> None:
    # 32 write tasks, each run by two episodes at once: if two episodes shared a database,
    # the second cancellation/return/order of the same rows would be refused or doubled,
    # and the final states would not match the goals.
    writes = [t for t in all_tasks() if not t.forbidden and t.answer is None][::5][: N // 2]
    assert len(writes) == N // 2
    tasks = writes + writes
    pool = EnvPool(lambda: gym.make("agentgym/WebAPI-v1", split="all"), n=N)
    try:
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda i: pool.envs[i].reset(options={"task_id": tasks[i].id}), range(N)))
        servers = {e.unwrapped.server for e in pool.envs}
        assert len(servers) == 1
        server = servers.pop()
        assert httpx.get(f"{server.url}/_admin/health").json()["episodes"] == N
        assert len({e.unwrapped.episode_key for e in pool.envs}) == N
        rewards: dict[int, float] = {}
        active = set(range(N))
        while active:
            results = pool.step({i: oracle_action(pool.envs[i]) for i in active})
            for i, r in results.items():
                if r.done:
                    rewards[i] = r.reward
                    active.discard(i)
        assert rewards == {i: 1.0 for i in range(N)}
        # Every episode's database holds exactly its own writes, none of its twin's.
        for i in (0, N // 2, N - 1):
            u = pool.envs[i].unwrapped
            assert u.client.snapshot(u.episode_key) == goal_state(tasks[i])
    finally:
        pool.close()
    assert not server.alive()
