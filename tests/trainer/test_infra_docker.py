"""Containers killed between episodes (as an engine restart kills them) cost the next episodes nothing.

A Docker engine restart kills every container at once, the warm containers a pool holds for
the next episodes among them. Killing the pool's containers between two collections does the
same to the trainer's collector, with the real CodeFix env, the real Docker backend and the
oracle's actions (``ReplayEngine``): the pool throws the dead containers away when the next
resets ask for them, so the next collection gets new sandboxes and solves its tasks, with no
episode lost. (A restart of a real engine, and the episodes it cuts mid-way, which are lost as
infrastructure faults and masked: tests/sandboxes/test_engine_restart.py.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from agentgym.errors import SandboxUnavailable
from agentgym.trainer.rollout.collector import Collector, drop_infra
from agentgym.trainer.rollout.engines.replay import ReplayEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SEEDS = [3, 4]


@pytest.fixture()
def pool() -> Iterator[Any]:
    from agentgym.sandboxes import image
    from agentgym.sandboxes.docker_backend import SandboxPool, docker_client

    try:
        client = docker_client()
        client.images.get(image.image_tag())
        p = SandboxPool(size=2, client=client)
    except (SandboxUnavailable, Exception) as exc:  # no engine, or no image built on this machine
        pytest.skip(f"docker backend unavailable: {exc}")
    yield p
    p.close()


def _kill_all(pool: Any) -> set[str]:
    """SIGKILL every container of ``pool`` (held by an env or waiting warm), as an engine restart
    does, and wait until they are gone; only this pool's (``pool._live``), so other tests'
    sandboxes in this process live on."""
    found = [c for c in pool.client.containers.list() if c.id in set(pool._live)]
    for c in found:
        try:
            c.kill()
        except Exception:  # already gone (auto-remove)
            pass
    ids = {c.id for c in found}
    deadline = time.monotonic() + 120
    while ids & {c.id for c in pool.client.containers.list()}:
        assert time.monotonic() < deadline, "killed containers were still running after 120 s"
        time.sleep(0.1)
    return ids


def _wait_warm(pool: Any, n: int, timeout: float = 180.0) -> None:
    """Until the pool holds ``n`` started containers for the next episodes (its refill is async)."""
    deadline = time.monotonic() + timeout
    while pool._ready.qsize() < n:
        assert time.monotonic() < deadline, f"the pool did not refill to {n} within {timeout} s"
        time.sleep(0.1)


def test_containers_killed_between_collections_are_replaced_not_lost(pool: Any) -> None:
    def make_env() -> Any:
        return gym.make("agentgym/CodeFix-v1", sandbox=pool, split="train", max_turns=8)

    engine = ReplayEngine.from_oracle(make_env, SEEDS)  # the oracle's actions, recorded on real sandboxes
    col = Collector.from_factory(make_env, len(SEEDS), engine, max_new_tokens=4096)
    try:
        before, _ = col.collect(SEEDS, temperature=1.0, sample_seed=0)
        assert [t.infra_error for t in before] == [None, None]
        assert [t.traj.total_reward for t in before] == [1.0, 1.0]

        _wait_warm(pool, 2)
        killed = _kill_all(pool)  # the engine restarts: the warm containers are dead
        assert len(killed) >= 4  # two held by the envs, two warm

        after, _ = col.collect(SEEDS, temperature=1.0, sample_seed=0)  # new sandboxes, nothing lost
        assert [t.infra_error for t in after] == [None, None]
        assert [t.traj.total_reward for t in after] == [1.0, 1.0]
        in_use = {e.unwrapped.sandbox.container_id for e in col.pool.envs}
        assert not in_use & killed
        assert all(e.unwrapped.sandbox.runner_losses == 0 for e in col.pool.envs)
        kept, _, dropped = drop_infra(after, [0, 1])
        assert dropped == 0 and kept == after
    finally:
        col.close()
