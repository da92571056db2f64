from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym import ConfigError, Trajectory, Turn, read_jsonl, write_jsonl

from .toy import EchoEnv

finite = st.floats(allow_nan=False, allow_infinity=False)


@given(st.lists(st.integers(0, 263), max_size=50), finite, st.dictionaries(st.text(max_size=5), finite, max_size=3),
       st.lists(st.one_of(st.none(), finite), max_size=50), st.one_of(st.none(), st.integers()))
def test_json_round_trip_is_lossless(tokens, reward, comps, lps, seed) -> None:
    t = Trajectory("agentgym/X-v0", seed, "task-1", "agentgym-byte-v1", tokens=tokens,
                   policy_mask=[i % 2 for i in range(len(tokens))], logprobs=lps,
                   turns=[Turn(0, 1, 2, reward, comps, "tool", None)], meta={"a": [1, "b"]})
    assert Trajectory.from_json(t.to_json()) == t


def test_copy_is_equal_and_shares_nothing_mutable() -> None:
    """``Trajectory.copy`` (what the rollout hands the learner) against ``copy.deepcopy``."""
    t = Trajectory("agentgym/X-v0", 7, "task-1", "agentgym-byte-v1", tokens=[1, 2, 3], policy_mask=[0, 1, 1],
                   logprobs=[None, -0.5, -0.25], prompt_len=1, turns=[Turn(1, 3, 3, 1.0, {"answer": 1.0}, "calc", "bad")],
                   terminated=True, truncated=True,
                   meta={"options": {"split": "eval"}, "token_versions": [-1, 0, 0], "pair": (1, [2])})
    for f in dataclasses.fields(Trajectory):  # a field added later must be set here, so that copy() is checked on it
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            assert getattr(t, f.name) != default, f.name
    before = copy.deepcopy(t)
    c = t.copy()
    assert c == t
    c.tokens.append(9)
    c.policy_mask[0] = 1
    c.logprobs[0] = -1.0
    c.turns[0].reward = 0.0
    c.turns[0].components["answer"] = 0.0
    c.turns.append(Turn(3, 3, 3, 0.0))
    c.meta["options"]["split"] = "train"
    c.meta["token_versions"].append(1)
    c.meta["pair"][1].append(3)
    assert t == before


def test_jsonl_file_round_trip_from_a_real_episode(tmp_path) -> None:
    env = EchoEnv()
    trajs = []
    for seed in range(3):
        env.reset(seed=seed)
        env.step(np.array(env.codec.final_ids("x")))
        env.trajectory.set_action_logprobs(0, [-0.5] * (env.trajectory.turns[0].action_end
                                                        - env.trajectory.turns[0].action_start))
        trajs.append(env.trajectory)
    path = tmp_path / "t.jsonl"
    assert write_jsonl(path, trajs) == 3
    assert read_jsonl(path) == trajs


def test_nan_is_refused_and_bad_files_name_the_line(tmp_path) -> None:
    t = Trajectory("e", 0, "t", "tok", turns=[Turn(0, 0, 0, math.nan)])
    with pytest.raises(ValueError):
        t.to_json()
    p = tmp_path / "bad.jsonl"
    p.write_text('{"env_id": 1}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        read_jsonl(p)


def test_logprob_count_must_match_the_action() -> None:
    env = EchoEnv()
    env.reset(seed=0)
    env.step(np.array(env.codec.final_ids("x")))
    with pytest.raises(ConfigError, match="log-probs arrived"):
        env.trajectory.set_action_logprobs(0, [0.0])
