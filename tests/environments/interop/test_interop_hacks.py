"""The hack suite on the imported envs (:data:`agentgym.environments.hacks.INTEROP_CASES`): every
cheating policy earns exactly 0 in both reward modes, no code-executing answer leaves a trace on
the host, and the oracle still earns 1 on the same tasks."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

from agentgym.environments.hacks import INTEROP_CASES, RCE_TARGET, interop_tasks, play
from agentgym.oracles import run_oracle
from tests.environments.interop.conftest import require


@pytest.fixture(autouse=True)
def _no_target() -> None:
    if os.path.exists(RCE_TARGET):
        os.remove(RCE_TARGET)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(INTEROP_CASES))
def test_no_interop_hack_earns_anything_and_the_oracle_does(case: str) -> None:
    env_id, kwargs, hacks = INTEROP_CASES[case]
    require("reasoning_gym" if "ReasoningGym" in env_id else "skyrl_gym")
    envs = {mode: gym.make(env_id, reward_mode=mode, max_turns=6, **kwargs) for mode in ("sparse", "shaped")}
    tasks = interop_tasks(case)
    paid: dict[str, list[tuple[str, dict[str, object], float]]] = {}
    played: set[str] = set()
    try:
        for mode, env in envs.items():
            for hack in hacks():
                for options in tasks:
                    r = play(env, hack, options)
                    if r is None:
                        continue
                    played.add(hack.name)
                    if r != 0.0:
                        paid.setdefault(hack.name, []).append((mode, options, r))
        assert paid == {}, paid
        assert played == {h.name for h in hacks()}, "every hack must apply to some task"
        assert not os.path.exists(RCE_TARGET)
        plain = {k: v for k, v in kwargs.items() if k not in ("partial_credit", "no_attempt_guard")}
        envs["oracle"] = gym.make(env_id, max_turns=6, **plain)
        for options in tasks:
            assert run_oracle(envs["oracle"], seed=0, options=options).total_reward == 1.0
    finally:
        for env in envs.values():
            env.close()
