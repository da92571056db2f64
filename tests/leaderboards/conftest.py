"""Shared by the leaderboard tests: small suites written to tmp dirs, and submissions made on them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentgym.leaderboards.evaluate import run_suite
from agentgym.leaderboards.policies import make_policy
from agentgym.leaderboards.suite import Suite, load_suite, suite_hash

# Math (no services) and WebAPI (a real HTTP server: tool calls with observations to tamper with).
SMALL: dict[str, Any] = {
    "name": "small",
    "description": "a test suite",
    "trials": 2,
    "seed": 0,
    "sampling": {"temperature": 1.0},
    "envs": [
        {"id": "agentgym/Math-v1", "kwargs": {"reward_mode": "sparse", "max_turns": 2, "max_action_tokens": 256},
         "tasks": [{"index": i} for i in range(4)]},
        {"id": "agentgym/WebAPI-v1", "kwargs": {"split": "eval", "reward_mode": "sparse", "max_turns": 8},
         "tasks": [{"task_id": "eval-order_status-16"}, {"task_id": "eval-cancel-24"}]},
    ],
}


def write_suite(directory: Path, content: dict[str, Any]) -> Suite:
    """Write ``content`` as ``directory/NAME.yaml`` with its version filled in; return it loaded."""
    content = {**content, "version": suite_hash(content)}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{content['name']}.yaml"
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return load_suite(path)


def make_submission(suite: Suite, policy: str, out: Path, **policy_args: Any) -> Path:
    pol = make_policy(policy, {"temperature": suite.temperature}, **policy_args)
    path = run_suite(suite, pol, out, name=policy, policy_name=policy, policy_args=policy_args, workers=2,
                     progress=False)
    assert path is not None
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return path


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Skip without a Docker engine and the sandbox image (CI turns the skip of a ``docker`` test
    into a failure: tests/conftest.py)."""
    from agentgym.errors import SandboxUnavailable
    from agentgym.sandboxes import image
    from agentgym.sandboxes.docker_backend import docker_client

    try:
        image.wait_for_build()  # scripts/test.sh builds the image beside the first tests
        docker_client().images.get(image.image_tag())
    except SandboxUnavailable as e:
        pytest.skip(f"docker backend unavailable: {e}")
    except Exception as e:  # the image is missing: `agentgym sandbox build` (scripts/setup-system.sh)
        pytest.skip(f"sandbox image {image.image_tag()} unavailable: {e}")


@pytest.fixture(scope="session")
def webapi_server() -> Iterator[None]:
    """One WebAPI env held open for the session keeps the shared server up: every verify and
    eval in these tests would otherwise start and stop it (~3 s each)."""
    import gymnasium as gym

    import agentgym  # noqa: F401

    env = gym.make("agentgym/WebAPI-v1", split="eval")
    env.reset(seed=0)
    yield
    env.close()


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory, webapi_server: None) -> Suite:
    return write_suite(tmp_path_factory.mktemp("suites"), SMALL)


@pytest.fixture(scope="session")
def oracle_submission(small_suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean submission (plain JSONL, to tamper with line by line)."""
    return make_submission(small_suite, "oracle", tmp_path_factory.mktemp("subs") / "oracle.jsonl")
