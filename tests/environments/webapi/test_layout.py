"""The package's public surface and the server/client split (STYLE.md #9)."""

from __future__ import annotations

import subprocess
import sys

import agentgym.environments.webapi as webapi

CLIENT_PROBE = """
import sys
import gymnasium as gym
import agentgym
from agentgym.environments.webapi import oracle_action, run_episode
env = gym.make("agentgym/WebAPI-v1")
reward, _ = run_episode(env, oracle_action, seed=0)
env.close()
server_side = [m for m in sys.modules if m.split(".")[-1] in ("app", "serve", "storage", "spec")
               and m.startswith("agentgym.environments.webapi")]
print(reward, server_side)
"""


def test_public_surface() -> None:
    assert sorted(webapi.__all__) == ["WebAPIEnv", "noop_action", "oracle_action", "run_episode"]
    from agentgym.environments.webapi import env, policies

    # the lazy names are the objects of the modules that define them (not stand-ins)
    assert webapi.WebAPIEnv is env.WebAPIEnv
    for name in ("noop_action", "oracle_action", "run_episode"):
        assert getattr(webapi, name) is getattr(policies, name), name


def test_client_side_never_imports_the_server_modules() -> None:
    out = subprocess.run([sys.executable, "-c", CLIENT_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "[]"]
