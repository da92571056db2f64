"""Shared fixtures for the WebAPI tests: one real server for the module, episodes per test."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers agentgym/WebAPI-v1)


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    e = gym.make("agentgym/WebAPI-v1", split="all")
    yield e
    e.close()


def call(env: gym.Env, name: str, **args: object) -> tuple[str, dict]:
    """One tool call through the token interface; returns (observation text, info)."""
    u = env.unwrapped
    obs, _, terminated, truncated, info = env.step(u.codec.tool_call_ids(name, dict(args)))
    assert not terminated and not truncated, info
    return u.tokenizer.decode(obs.tolist()), info


def final(env: gym.Env, text: str) -> tuple[float, dict]:
    u = env.unwrapped
    _, reward, terminated, _, info = env.step(u.codec.final_ids(text))
    assert terminated
    return float(reward), info


def pytest_itemcollected(item: pytest.Item) -> None:
    """In parallel runs the WebAPI tests stay on one worker, in file order, as in a serial run:
    test_load and test_reliability count the episodes and references on this process's shared
    server, which other WebAPI tests' envs (module-scoped ones included) also hold."""
    item.add_marker(pytest.mark.xdist_group("webapi-server"))
