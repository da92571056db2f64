"""CodeFix-v1 on the bubblewrap backend (no daemon): the oracle scores 1, do-nothing 0."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.codefix.oracle import noop_policy, oracle_policy
from agentgym.errors import SandboxUnavailable
from agentgym.sandboxes import make_sandbox

pytestmark = pytest.mark.bwrap


def outcome(env: gym.Env, policy: Any, index: int) -> float:
    env.reset(options={"index": index})
    while True:
        _, _, term, trunc, info = env.step(policy(env))
        if term or trunc:
            return float(info["reward_components"]["outcome"])


def test_oracle_and_noop_on_bwrap() -> None:
    try:
        make_sandbox("bwrap").close()
    except SandboxUnavailable as exc:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI must run the bwrap tests but bwrap is unavailable: {exc}")
        pytest.skip(f"bwrap backend unavailable: {exc}")
    env = gym.make("agentgym/CodeFix-v1", split="eval", sandbox="bwrap")
    try:
        for index in (0, 40, 120):
            assert outcome(env, noop_policy, index) == 0.0
            assert outcome(env, oracle_policy, index) == 1.0
    finally:
        env.close()
