"""A sandbox lost between episodes is an infrastructure fault of the next episode, not a crash.

A Docker engine restart kills every container at once: the warm containers a pool holds for
the next episodes die with it, and the next reset's runner answers nothing (``RunnerGone``,
after one restart that meets another dead container). Killing the pool's containers between
two collections does the same to the trainer's collector, with the real CodeFix env, the real
Docker backend and the oracle's actions (``ReplayEngine``): the episodes that met dead
containers are recorded as infrastructure faults and masked, the collection goes on, and the
next collection gets new sandboxes and solves its tasks again.
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


def _kill_all(pool: Any) -> int:
    """SIGKILL every container of ``pool`` (held by an env or waiting warm), as an engine restart
    does; only this pool's (``pool._live``), so other tests' sandboxes in this process live on."""
    found = [c for c in pool.client.containers.list() if c.id in set(pool._live)]
    for c in found:
        try:
            c.kill()
        except Exception:  # already gone (auto-remove)
            pass
    return len(found)


def _wait_warm(pool: Any, n: int, timeout: float = 180.0) -> None:
    """Until the pool holds ``n`` started containers for the next episodes (its refill is async)."""
    deadline = time.monotonic() + timeout
    while pool._ready.qsize() < n:
        assert time.monotonic() < deadline, f"the pool did not refill to {n} within {timeout} s"
        time.sleep(0.1)


def test_runner_gone_at_reset_is_an_infra_fault_and_the_next_reset_gets_a_new_sandbox(pool: Any) -> None:
    def make_env() -> Any:
        return gym.make("agentgym/CodeFix-v1", sandbox=pool, split="train", max_turns=8)

    engine = ReplayEngine.from_oracle(make_env, SEEDS)  # the oracle's actions, recorded on real sandboxes
    col = Collector.from_factory(make_env, len(SEEDS), engine, max_new_tokens=4096)
    try:
        before, _ = col.collect(SEEDS, temperature=1.0, sample_seed=0)
        assert [t.infra_error for t in before] == [None, None]
        assert [t.total_reward for t in before] == [1.0, 1.0]

        _wait_warm(pool, 2)
        assert _kill_all(pool) >= 2  # the engine restarts: the warm containers are dead
        hit, _ = col.collect(SEEDS, temperature=1.0, sample_seed=0)  # RunnerGone in the resets: no crash
        lost = [t for t in hit if t.infra_error is not None]
        assert lost, "no episode met a dead container"
        assert all("RunnerGone" in str(t.infra_error) or "Sandbox" in str(t.infra_error) for t in lost)
        assert all(len(t.turns) == 0 for t in lost)  # no outcome was recorded for them
        kept, _, dropped = drop_infra(hit, [0, 1]) if len(lost) < len(hit) else ([], [], len(hit))
        assert dropped == len(lost) and all(t.infra_error is None for t in kept)

        after, _ = col.collect(SEEDS, temperature=1.0, sample_seed=0)  # new sandboxes from here on
        assert [t.infra_error for t in after] == [None, None]
        assert [t.total_reward for t in after] == [1.0, 1.0]
    finally:
        col.close()
