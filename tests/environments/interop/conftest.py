"""Shared by the interop tests: the hubs' packages (the ``[interop]`` extra), suites written to tmp
dirs, and agentgym's own chat server serving a tiny GPT-OSS on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentgym.leaderboards.suite import suite_hash

MATH_ID = "agentgym/Math-v0"  # the math ids may move to -v1: every interop test names Math through this


def write_suite(tmp: Path, name: str, envs: list[dict[str, Any]], trials: int = 1) -> Path:
    content: dict[str, Any] = {"name": name, "trials": trials, "seed": 0, "sampling": {"temperature": 1.0},
                               "envs": envs}
    content["version"] = suite_hash(content)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def openenv_math() -> Iterator[str]:
    """agentgym's Math served as an OpenEnv environment server (OpenEnv's create_app), on loopback."""
    pytest.importorskip("openenv.core", reason="pip install 'agentgym-suite[interop]'")
    from agentgym.environments.interop.launch import start_server

    srv = start_server([sys.executable, "-m", "agentgym.environments.interop.openenv_export", MATH_ID])
    try:
        yield srv.url
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def tiny_server() -> Iterator[tuple[str, Any]]:
    """agentgym's OpenAI-compatible server (``/v1/chat/completions``) sampling an untrained tiny GPT-OSS."""
    torch = pytest.importorskip("torch", reason="the chat server needs the [train] extra")
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.engines.hf import HFEngine
    from agentgym.trainer.engines.server import CompletionServer
    from agentgym.trainer.model import build_tiny_gptoss

    tok = ByteTokenizer()
    model = build_tiny_gptoss(tok.vocab_size, seed=0, num_hidden_layers=2)
    model.eval()
    del torch
    with CompletionServer(HFEngine(model), max_tokens=48) as server:
        yield f"{server.url}/v1", model
