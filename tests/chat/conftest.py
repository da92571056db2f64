"""Shared by the chat tests: every registered environment, Docker ones marked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

import agentgym

NEEDS_DOCKER = {"agentgym/CodeFix-v0", "agentgym/MathTool-v0"}
ENV_IDS = [pytest.param(i, marks=pytest.mark.docker) if i in NEEDS_DOCKER else i
           for i in agentgym.registered_ids()]


@pytest.fixture
def make() -> Iterator[Callable[..., gym.Env]]:
    """``make(env_id, **kwargs)``; every env made is closed after the test."""
    made: list[gym.Env] = []

    def _make(env_id: str, **kwargs: Any) -> gym.Env:
        if env_id in NEEDS_DOCKER:
            from agentgym.sandboxes import make_sandbox  # noqa: F401  (fails loudly if missing)
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()
