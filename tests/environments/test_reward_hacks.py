"""The hack suite: every cheating policy of :mod:`agentgym.environments.hacks` earns exactly 0,
on every built-in environment, in both reward modes.

The table (echo the question or its expression, an unreduced fraction, the question's numbers,
constants where they are wrong, several answers at once, hedges and negations, unknown LaTeX, a
tiny extra term, refusing everything, refusals picked from the wording, blind answers, and the
CodeFix attacks on the judge) is played on a sample of tasks of both splits; each hack must
apply somewhere, so the table is never vacuous. ``bench/reward_hacks.py`` prints it, larger.
MathTool's hacks never run code, so they take no sandbox; CodeFix's need Docker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import agentgym
from agentgym.environments.hacks import hack_ids, hack_tasks, hacks_for, play

NEEDS_DOCKER = {"agentgym/CodeFix-v1"}
KWARGS: dict[str, dict[str, Any]] = {"agentgym/WebAPI-v1": {"split": "all"},
                                     "agentgym/CodeFix-v1": {"sandbox_seconds": 5.0}}


def test_every_builtin_env_declares_a_hack_table_with_its_capabilities() -> None:
    builtins = {i for i in agentgym.registered_ids() if i.startswith("agentgym/")}
    assert builtins <= set(hack_ids()), f"declare Capabilities(hacks=...) for {builtins - set(hack_ids())}"
    for env_id in builtins:
        assert agentgym.capabilities(env_id).hacks is not None and hacks_for(env_id), env_id


def test_an_env_without_a_hack_table_is_named_and_the_ones_with_one_listed() -> None:
    with pytest.raises(agentgym.ConfigError, match=r"'agentgym/Remote-v0' declares no hack table.*agentgym/Math-v1"):
        hacks_for("agentgym/Remote-v0")


@pytest.fixture
def make(request: pytest.FixtureRequest) -> Iterator[Any]:
    made: list[gym.Env] = []

    def _make(env_id: str, **kw: Any) -> gym.Env:
        if env_id in NEEDS_DOCKER:
            pool = request.getfixturevalue("docker_pool")
            kw["sandbox"] = lambda: pool.acquire()
        env = gym.make(env_id, max_turns=6, **KWARGS.get(env_id, {}), **kw)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.docker) if i in NEEDS_DOCKER else i
                                    for i in hack_ids()])
def test_no_hack_earns_anything(env_id: str, mode: str, make: Any) -> None:
    env = make(env_id, reward_mode=mode)
    tasks = hack_tasks(env_id, env)
    paid: dict[str, list[tuple[dict[str, Any], float]]] = {}
    played: dict[str, int] = {}
    for hack in hacks_for(env_id):
        for options in tasks:
            r = play(env, hack, options)
            if r is None:
                continue
            played[hack.name] = played.get(hack.name, 0) + 1
            if r != 0.0:
                paid.setdefault(hack.name, []).append((options, r))
    assert paid == {}, {k: v[:3] for k, v in paid.items()}
    assert set(played) == {h.name for h in hacks_for(env_id)}, "every hack must apply to some task"
