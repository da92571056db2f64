"""Remote-v0 returns exactly what the local env returns: tokens, rewards, flags, info, trajectory.

Every registered environment is served by a real ``agentgym serve env`` process; the local env plays
its oracle (and some malformed actions), and the same actions are replayed through the client.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.errors import ActionTypeError, ConfigError
from agentgym.oracles import get_oracle
from agentgym.serving.env_wire import jsonable

pytestmark = pytest.mark.scale  # WebSocket sessions: the [scale] extra (must run in CI)
NEEDS_DOCKER = {"agentgym/CodeFix-v1", "agentgym/MathTool-v1"}
# Constructor keywords each env is made with on both sides (the remote client sends them).
KWARGS: dict[str, dict[str, Any]] = {
    "agentgym/Math-v1": {"reward_mode": "shaped"},
    "agentgym/MathCalc-v1": {"reward_mode": "shaped", "max_turns": 6},
    "agentgym/MathTool-v1": {"reward_mode": "shaped"},
    "agentgym/CodeFix-v1": {"reward_mode": "shaped"},
    "agentgym/WebAPI-v1": {"reward_mode": "shaped"},
    "agentgym/Lookup-v1": {"reward_mode": "shaped", "fail_rate": 0.3, "max_turns": 12},
}
SEEDS = (0, 1)


def test_every_registered_env_is_covered() -> None:
    # the built-ins (another test in the same process may have registered an env of its own)
    assert set(KWARGS) == {i for i in agentgym.registered_ids() if i.startswith("agentgym/")}


def _garbage(vocab: int) -> list[Any]:
    """Actions a bad policy sends; each must give the same error observation remotely."""
    return [np.array([1, 2, 3]), np.array([vocab + 5]), np.array([], dtype=np.int64), np.array([-1, 4])]


WRONG_TYPES = [np.array([[1, 2], [3, 4]]), np.array([1.5, 2.0]), "not tokens", None, {"content": "x"}]


def _play_local(env: gym.Env, seed: int) -> tuple[Any, list[tuple[Any, Any]]]:
    """Reset, a few malformed actions, then the oracle: (reset output, [(action, step output)])."""
    oracle = get_oracle(env.unwrapped.env_id)  # type: ignore[attr-defined]
    first = env.reset(seed=seed)
    steps: list[tuple[Any, Any]] = []
    for a in _garbage(env.unwrapped.tokenizer.vocab_size)[:2]:  # type: ignore[attr-defined]
        steps.append((a, env.step(a)))
    done = False
    while not done:
        a = oracle(env)
        out = env.step(a)
        steps.append((a, out))
        done = out[2] or out[3]
    return first, steps


MEASURED = ("sandbox_seconds",)  # wall-clock seconds the sandbox ran (the CodeFix judge included)


def _info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without the measured times, which no two runs share."""
    return {k: v for k, v in jsonable(info).items() if k not in MEASURED}


def _same(local: Any, remote: Any) -> None:
    (lo, li), (ro, ri) = local, remote
    assert ro.dtype == np.int64 and ro.tolist() == lo.tolist()
    assert _info(ri) == _info(li)


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.docker) if i in NEEDS_DOCKER else i
                                    for i in sorted(KWARGS)])
def test_remote_matches_local_token_for_token(env_id: str, serve_process) -> None:
    server = serve_process(env_id)
    local = gym.make(env_id, **KWARGS[env_id])
    remote = gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id, **KWARGS[env_id])
    try:
        for seed in SEEDS:
            first, steps = _play_local(local, seed)
            _same(first, remote.reset(seed=seed))
            for action, (lo, lr, lterm, ltrunc, li) in steps:
                ro, rr, rterm, rtrunc, ri = remote.step(action)
                assert ro.tolist() == lo.tolist(), (env_id, seed, action)
                assert (rr, rterm, rtrunc) == (lr, lterm, ltrunc)
                assert _info(ri) == _info(li)
            lt, rt = local.unwrapped.trajectory, remote.unwrapped.trajectory  # type: ignore[attr-defined]
            assert rt.to_dict() == lt.to_dict()
            assert rt.total_reward == lt.total_reward and lt.terminated
    finally:
        local.close()
        remote.close()


def test_split_passes_through(serve_process) -> None:
    """``split=`` (a keyword argument) and ``options={"split": ...}`` reach the served env."""
    env_id = "agentgym/MathCalc-v1"
    server = serve_process(env_id)
    local = gym.make(env_id, split="eval")
    remote = gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id, split="eval")
    try:
        assert remote.unwrapped.splits == local.unwrapped.splits == ("train", "eval")
        for seed, options in ((1, None), (2, {"split": "train"}), (3, {"split": "eval"})):
            lo, li = local.reset(seed=seed, options=options)
            ro, ri = remote.reset(seed=seed, options=options)
            assert ro.tolist() == lo.tolist() and ri == jsonable(li)
            assert ri["split"] == (options or {}).get("split", "eval")
        with pytest.raises(ConfigError, match="did you mean 'eval'"):
            remote.reset(options={"split": "test"})
    finally:
        local.close()
        remote.close()


def test_bad_actions_give_the_local_error_observations(serve_process) -> None:
    env_id = "agentgym/MathCalc-v1"
    server = serve_process(env_id)
    local = gym.make(env_id, max_turns=20)
    remote = gym.make("agentgym/Remote-v0", url=server.url, env_id=env_id, max_turns=20)
    try:
        local.reset(seed=3)
        remote.reset(seed=3)
        for a in _garbage(local.unwrapped.tokenizer.vocab_size):  # type: ignore[attr-defined]
            lo, lr, lterm, ltrunc, li = local.step(a)
            ro, rr, rterm, rtrunc, ri = remote.step(a)
            assert (ro.tolist(), rr, rterm, rtrunc, ri) == (lo.tolist(), lr, lterm, ltrunc, jsonable(li)), a
            assert ri["error"]
        assert remote.unwrapped.trajectory.to_dict() == local.unwrapped.trajectory.to_dict()  # type: ignore[attr-defined]
        for a in WRONG_TYPES:  # a program's mistake raises the same error on both sides, using no turn
            with pytest.raises(ActionTypeError) as lerr:
                local.step(a)
            with pytest.raises(ActionTypeError) as rerr:
                remote.step(a)
            assert str(lerr.value) == str(rerr.value)
        assert remote.unwrapped.trajectory.to_dict() == local.unwrapped.trajectory.to_dict()  # type: ignore[attr-defined]
    finally:
        local.close()
        remote.close()


def test_http_sessions_match_too(serve_process) -> None:
    env_id = "agentgym/Math-v1"
    server = serve_process(env_id)
    local = gym.make(env_id)
    remote = gym.make("agentgym/Remote-v0", url=server.http_url, env_id=env_id)
    try:
        for seed in SEEDS:
            first, steps = _play_local(local, seed)
            _same(first, remote.reset(seed=seed))
            for action, out in steps:
                ro, *rest = remote.step(action)
                assert [ro.tolist(), *rest[:3], rest[3]] == [out[0].tolist(), *out[1:4], jsonable(out[4])]
            assert remote.unwrapped.trajectory.to_dict() == local.unwrapped.trajectory.to_dict()  # type: ignore[attr-defined]
        assert server.health()["sessions"] == 1
    finally:
        local.close()
        remote.close()
    assert server.health()["sessions"] == 0  # close() ended the session on the server


def test_check_env_passes_on_the_client(serve_process) -> None:
    from gymnasium.utils.env_checker import check_env

    server = serve_process("agentgym/Math-v1")
    env = gym.make("agentgym/Remote-v0", url=server.url, env_id="agentgym/Math-v1")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
