"""Splits, on every registered environment: declared, honoured, refused when unknown, disjoint.

* every env class declares ``splits`` with "train" and "eval";
* ``split`` works as a constructor argument and as a reset option (``info["split"]`` says which);
  an unknown name is a ConfigError with a did-you-mean, never ignored;
* train and eval problems are disjoint: over a large sample for the procedural math envs (and
  every problem's split is the hash of its question), exactly for the fixed corpora;
* a task's id is the problem's identity: the same question always has the same id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.environments.math.generators import FAMILIES, LEVELS, generate
from agentgym.errors import ConfigError
from agentgym.splits import hash_split

NEEDS_DOCKER = {"agentgym/CodeFix-v1"}  # its reset takes a sandbox; MathTool's only at a python call
BUILTIN = sorted(i for i in agentgym.registered_ids() if i.startswith("agentgym/"))
MATH = ["agentgym/Math-v1", "agentgym/MathCalc-v1", "agentgym/MathTool-v1"]


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[gym.Env] = []

    def _make(env_id: str, **kw: Any) -> gym.Env:
        env = gym.make(env_id, **kw)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()


@pytest.mark.parametrize("env_id", BUILTIN)
def test_every_env_declares_its_splits(env_id: str) -> None:
    cls = gym.spec(env_id).entry_point
    module, name = str(cls).split(":")
    env_cls = getattr(__import__(module, fromlist=[name]), name)
    assert {"train", "eval"} <= set(env_cls.splits) and env_cls.splits[0] == "train"


@pytest.mark.parametrize("env_id", [i for i in BUILTIN if i not in NEEDS_DOCKER])
def test_split_is_honoured_as_an_argument_and_as_a_reset_option(env_id: str, make: Any) -> None:
    env = make(env_id, split="eval")
    assert env.reset(seed=0)[1]["split"] == "eval"
    assert env.reset(seed=0, options={"split": "train"})[1]["split"] == "train"
    assert env.unwrapped.trajectory.meta["split"] == "train"
    assert env.reset(seed=0)[1]["split"] == "eval"  # the option held for one episode
    with pytest.raises(ConfigError, match="did you mean 'eval'"):
        env.reset(options={"split": "test" if env_id != "agentgym/WebAPI-v1" else "evl"})
    with pytest.raises(ConfigError, match="did you mean 'train'"):
        make(env_id, split="trian")


def test_an_env_without_splits_refuses_one() -> None:
    from tests.agentgym.toy import EchoEnv  # a ToolEnv that declares none

    with pytest.raises(ConfigError, match="has no splits"):
        EchoEnv(split="eval")
    env = EchoEnv()
    assert "split" not in env.reset(seed=0)[1]
    with pytest.raises(ConfigError, match="has no splits"):
        env.reset(options={"split": "eval"})


# ---------------------------------------------------------------------------- disjoint
def _generated(split: str, n: int) -> list[Any]:
    rng = np.random.default_rng(7 if split == "train" else 8)
    return [generate(f, lv, rng, split) for _ in range(n) for f in FAMILIES for lv in LEVELS]


def test_procedural_train_and_eval_problems_are_disjoint_over_a_large_sample() -> None:
    train, held_out = _generated("train", 100), _generated("eval", 100)  # 3,000 problems each
    assert all(p.split == hash_split(p.question) == "train" for p in train)
    assert all(p.split == hash_split(p.question) == "eval" for p in held_out)
    assert not {p.question for p in train} & {p.question for p in held_out}
    assert len({p.question for p in held_out}) > 1500  # a real sample, not a few repeats


@pytest.mark.parametrize("env_id", MATH)
def test_math_envs_reset_into_their_split_only(env_id: str, make: Any) -> None:
    env = make(env_id, families=None, levels=None)
    seen: dict[str, set[str]] = {"train": set(), "eval": set()}
    for split in seen:
        for seed in range(300):
            _, info = env.reset(seed=seed, options={"split": split})
            assert hash_split(info["prompt"]) == split
            seen[split].add(info["prompt"])
    assert not seen["train"] & seen["eval"] and min(map(len, seen.values())) > 200


def test_the_same_question_has_the_same_task_id() -> None:
    ids: dict[str, str] = {}
    qs: dict[str, str] = {}
    for p in _generated("train", 60) + _generated("eval", 60):
        assert ids.setdefault(p.question, p.id) == p.id
        assert qs.setdefault(p.id, p.question) == p.question
    env = gym.make("agentgym/Math-v1")
    a = env.reset(seed=3, options={"family": "arithmetic", "level": "easy", "index": 5})[1]
    b = env.reset(seed=9, options={"family": "arithmetic", "level": "easy", "index": 5})[1]
    assert a["task_id"] == b["task_id"] == env.unwrapped.trajectory.task_id and a["prompt"] == b["prompt"]


def test_codefix_splits_are_disjoint_exactly() -> None:
    from agentgym.environments.codefix.tasks import select_tasks

    train, held_out = select_tasks("train", None), select_tasks("eval", None)
    assert not {t.problem for t in train} & {t.problem for t in held_out}
    assert not {t.buggy_source for t in train} & {t.buggy_source for t in held_out}
    assert not {t.id for t in train} & {t.id for t in held_out}
    assert all(t.number % 5 == 0 for t in held_out) and len(held_out) >= 60


def test_webapi_splits_are_disjoint_exactly() -> None:
    from agentgym.environments.webapi.tasks import split_tasks

    train, held_out = split_tasks("train"), split_tasks("eval")
    assert not {t.prompt for t in train} & {t.prompt for t in held_out}
    assert not {t.id for t in train} & {t.id for t in held_out}
    assert len(train) + len(held_out) == len(split_tasks("all")) and len(held_out) >= 60
    assert all(hash_split(t.prompt) == "eval" for t in held_out)
