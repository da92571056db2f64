"""Shared by the interop tests: the hubs' packages (the ``[interop]`` extra), suites written to tmp
dirs, agentgym's own chat server serving a tiny GPT-OSS on loopback (untrained, or memorizing
MathCalc-v1's oracle episode), and verifiers' plugins and offline chat program."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentgym.leaderboards.suite import suite_hash
from tests.chat import conftest as chat_conftest

MATH_ID = "agentgym/Math-v1"  # the math ids may move to -v1: every interop test names Math through this
MATHCALC_ID = "agentgym/MathCalc-v1"
VF_PLUGINS = Path(__file__).parent / "vf_plugins"  # verifiers plugins are top-level modules (vf-guess)

memorized = chat_conftest.memorized  # the fixture: a tiny GPT-OSS that plays MathCalc-v1 seed 0 (~40 s)


def require(module: str) -> None:
    """Skip the calling test module when ``module`` is not installed, without importing it:
    ``pytest.importorskip("openenv.core")`` imports gradio with it, ~5 s in the collection of every
    xdist worker, most of which never run these tests. The tests import it where they use it."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        found = False
    if not found:
        pytest.skip(f"{module} is not installed: pip install 'agentgym-suite[interop]'", allow_module_level=True)


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
    from agentgym.serving.model_server import CompletionServer
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines.hf import HFEngine

    tok = ByteTokenizer()
    model = build_tiny_gptoss(tok.vocab_size, seed=0, num_hidden_layers=2)
    model.eval()
    del torch
    with CompletionServer(HFEngine(model), max_tokens=48) as server:
        yield f"{server.url}/v1", model


@pytest.fixture(scope="session")
def memorized_server(memorized: Any) -> Iterator[str]:
    """agentgym's chat server (``/v1``) serving the tiny GPT-OSS that memorized MathCalc-v1's seed-0
    oracle episode (a calculator call, then the answer): greedy decoding replays it only if the
    prompt it is served is token for token the env's."""
    pytest.importorskip("torch", reason="the chat server needs the [train] extra")
    from agentgym.serving.model_server import CompletionServer
    from agentgym.trainer.rollout.engines.hf import HFEngine

    model, _ = memorized
    with CompletionServer(HFEngine(model), max_tokens=256) as server:
        yield f"{server.url}/v1"


@pytest.fixture(scope="session")
def vf_plugins() -> Iterator[Path]:
    """The test's verifiers plugins importable by id, as an installed package would be."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(VF_PLUGINS))
        yield VF_PLUGINS


@pytest.fixture(scope="session")
def offline_uv() -> dict[str, str]:
    """The harness environment under which verifiers installs its chat program with uv from the
    local wheelhouse (nothing is downloaded at test time)."""
    pytest.importorskip("verifiers.v1", reason="pip install 'agentgym-suite[interop]'")
    from agentgym.environments.interop.verifiers_export import default_wheelhouse, offline_uv_env

    env = offline_uv_env()
    if "UV_FIND_LINKS" not in env or "PATH" not in env:
        pytest.skip(f"no uv or no wheelhouse at {default_wheelhouse()}: build it with "
                    "python -m agentgym.environments.interop.verifiers_export --wheelhouse (scripts/setup-venv.sh does)")
    return env
