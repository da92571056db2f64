"""MathTool-v1 in real Docker sandboxes: contract, oracle, the python tool, budgets."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.mathtool.oracle import oracle_policy, python_code_for

pytestmark = pytest.mark.docker


@pytest.fixture
def make(docker_pool: Any) -> Iterator[Any]:
    made: list[gym.Env] = []

    def _make(**kw: Any) -> gym.Env:
        # a lambda, not the pool: gym.make and check_env deep-copy their kwargs
        kw.setdefault("sandbox", lambda: docker_pool.acquire())
        env = gym.make("agentgym/MathTool-v1", **kw)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()


def python(env: gym.Env, code: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    u = env.unwrapped
    obs, r, term, trunc, info = env.step(np.asarray(u.codec.tool_call_ids("python", {"code": code})))
    return u.tokenizer.decode(obs.tolist()), r, term, trunc, info


def test_check_env_via_gym_make(make: Any) -> None:
    check_env(make().unwrapped, skip_render_check=True)


def test_oracle_computes_in_the_sandbox_then_answers(make: Any) -> None:
    env = make(families=["arithmetic", "fractions"], reward_mode="shaped")
    for seed in range(4):
        env.reset(seed=seed)
        _, r, term, _, info = env.step(oracle_policy(env))
        assert not term and info["tool_call"]["name"] == "python"
        assert env.unwrapped.last_output.strip() == env.unwrapped.task.answer
        _, r, term, _, info = env.step(oracle_policy(env))
        assert term and info["reward_components"]["outcome"] == 1.0


def test_oracle_without_expression_answers_directly(make: Any) -> None:
    env = make(families=["derivative"])
    env.reset(seed=0)
    _, r, term, _, _ = env.step(oracle_policy(env))
    assert term and r == 1.0


def test_python_tool_reports_stdout_stderr_exit_code_and_cuts_output(make: Any) -> None:
    env = make(max_output_chars=100)
    env.reset(seed=0)
    text, r, term, trunc, info = python(env, "import sys; print(6*7); print('oops', file=sys.stderr); sys.exit(3)")
    assert "exit code: 3" in text and "42" in text and "oops" in text
    assert not (term or trunc) and info["tool_result"]["ok"] is False
    text, *_ = python(env, "print('x' * 100_000)")
    assert "output cut" in text and text.count("x") < 300
    text, *_ = python(env, "open('state.txt', 'w').write('kept')")
    text, *_ = python(env, "print(open('state.txt').read())")
    assert "kept" in text  # the work dir lives for the episode
    # No network, shown on loopback only: a listener on the host's 127.0.0.1 is not reachable,
    # and the sandbox has no interface but lo (so no route to anywhere else).
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        text, *_ = python(env, "import socket\ntry:\n    socket.create_connection(('127.0.0.1', "
                               f"{port}), timeout=2); print('CONNECTED')\nexcept OSError as e:\n"
                               "    print('refused', type(e).__name__)")
        assert "refused ConnectionRefusedError" in text, text
    text, *_ = python(env, "import socket; print(sorted(n for _, n in socket.if_nameindex()))")
    assert "['lo']" in text, text


def test_timeout_and_sandbox_budget_truncate(make: Any) -> None:
    env = make(command_timeout=1.0, sandbox_seconds=2.5)
    env.reset(seed=0)
    text, _, term, trunc, info = python(env, "while True: pass")
    assert "timed out" in text and not (term or trunc)
    _, _, term, trunc, info = python(env, "while True: pass")
    assert not trunc  # 2 s used of 2.5
    _, _, term, trunc, info = python(env, "while True: pass")
    assert trunc and not term and info["truncated_by"] == "sandbox_seconds"
    assert "budget used up" in info["tool_result"]["content"]


def test_determinism_and_sandbox_lifecycle(make: Any) -> None:
    a, b = make(families=["arithmetic"]), make(families=["arithmetic"])
    oa, ia = a.reset(seed=5)
    ob, ib = b.reset(seed=5)
    assert np.array_equal(oa, ob) and ia["task_id"] == ib["task_id"]
    ra, rb = a.step(oracle_policy(a)), b.step(oracle_policy(b))
    assert np.array_equal(ra[0], rb[0])
    first = a.unwrapped.sandbox
    assert first is not None  # taken by the oracle's python call
    a.reset(seed=6)
    assert first.closed and a.unwrapped.sandbox is None  # the next one is taken on demand
    python(a, "open('f', 'w').write('x')")
    second = a.unwrapped.sandbox
    assert second is not None and second is not first
    a.close()
    a.close()
    assert second.closed and a.unwrapped.sandbox is None


def test_python_code_for_is_exact() -> None:
    ns: dict[str, Any] = {}
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(python_code_for("(4/3) / (6/5) + 2^2"), ns)
    assert buf.getvalue().strip() == "46/9"
