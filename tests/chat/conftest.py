"""Shared by the chat tests: every registered environment, Docker ones marked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

import agentgym
from tests.memorize import memorize

NEEDS_DOCKER = {"agentgym/CodeFix-v1", "agentgym/MathTool-v1"}
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


@pytest.fixture(scope="session")
def memorized() -> Any:
    """A tiny GPT-OSS (2 layers, byte tokenizer) warm-started with the trainer's own SFT step on
    the oracle's MathCalc-v1 episode for seed 0 until it reproduces it (~100 steps, ~40 s on a
    loaded 2-core box). Greedy decoding replays the episode only if every prompt token it is
    given is the env's: the chat server's rendering is under test, not assumed."""
    torch = pytest.importorskip("torch", reason="the chat server needs the [train] extra")
    from agentgym.oracles import run_oracle
    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        env = gym.make("agentgym/MathCalc-v1")
        demo = run_oracle(env, seed=0)
        env.close()
        tok = env.unwrapped.tokenizer
        model = build_tiny_gptoss(tok.vocab_size, seed=0, num_hidden_layers=2)
        memorize(model, [demo], pad_id=tok.pad_id)
        model.eval()
        yield model, demo
    finally:
        torch.set_num_threads(threads)
