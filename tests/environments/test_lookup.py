"""Lookup-v1: a chain of dependent look-ups through a flaky service. The oracle walks every
depth through faults; each call's input is the last call's output; faults are drawn from the
seed (a replay sees the same ones) at the stated rate; the splits hold disjoint chains; bad
options are one-line errors."""

from __future__ import annotations

import json
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.lookup.env import UNAVAILABLE, LookupEnv, chain_split
from agentgym.environments.lookup.oracle import oracle_policy
from agentgym.errors import ConfigError


def _play(env: Any, seed: int, options: dict[str, Any] | None = None) -> tuple[float, Any]:
    env.reset(seed=seed, options=options)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, _ = env.step(oracle_policy(env))
        total, done = total + r, term or trunc
    return total, env.unwrapped.trajectory


@pytest.mark.parametrize("split", ["train", "eval"])
def test_the_oracle_walks_every_depth_through_faults(split: str) -> None:
    env = gym.make("agentgym/Lookup-v1", prompt="compact", max_turns=40, split=split)
    for depth in (1, 2, 3, 4, 6):
        for rate in (0.0, 0.5):
            for seed in range(6):
                r, traj = _play(env, seed, {"depth": depth, "fail_rate": rate})
                assert r == 1.0, (depth, rate, seed)
                calls = sum(1 for t in traj.turns if t.tool)
                assert calls >= depth and (rate > 0 or calls == depth)
                assert traj.task_id.startswith(f"lookup/d{depth}/")
    env.close()


def test_each_call_takes_the_last_result_and_one_wrong_link_fails_the_episode() -> None:
    env = LookupEnv(prompt="compact", depth=3)
    env.reset(seed=3)
    c = env.task.meta["codes"]
    _, _, _, _, info = env.step(env.codec.tool_call_ids("lookup", {"code": c[0]}))
    assert env.trajectory.turns[-1].tool == "lookup"
    assert env.hops == 1 and env.position == c[1]
    wrong = next(str(x) for x in range(100, 1000) if str(x) not in c)
    env.step(env.codec.tool_call_ids("lookup", {"code": wrong}))  # a code it never read
    assert env.counts["tool_errors"] == 1 and "unknown_code" in _last_tool_text(env) and env.hops == 1
    _, r, term, _, _ = env.step(env.codec.final_ids(c[2]))  # two links right, answered one short
    assert term and r == 0.0


def test_faults_come_at_the_stated_rate_from_the_seed() -> None:
    env = LookupEnv(prompt="compact", depth=1, fail_rate=0.3)
    fails = calls = 0
    for seed in range(400):
        env.reset(seed=seed)
        code = env.task.meta["codes"][0]
        for _ in range(3):
            env.step(env.codec.tool_call_ids("lookup", {"code": code}))
            calls += 1
            fails += env.last_failed
            if env._state.value != "running":
                break
    p = fails / calls
    assert abs(p - 0.3) < 4 * math.sqrt(0.3 * 0.7 / calls), p  # ~1,200 calls: 0.3 +- 0.053
    # a fault is a transient message the policy reads, not an error of its own
    env.reset(seed=next(s for s in range(100) if _first_call_fails(env, s)))
    env.step(env.codec.tool_call_ids("lookup", {"code": env.task.meta["codes"][0]}))
    assert env.counts["tool_errors"] == 0 and UNAVAILABLE in _last_tool_text(env)


def _first_call_fails(env: LookupEnv, seed: int) -> bool:
    env.reset(seed=seed)
    env.step(env.codec.tool_call_ids("lookup", {"code": env.task.meta["codes"][0]}))
    return env.last_failed


def _last_tool_text(env: LookupEnv) -> str:
    turn = env.trajectory.turns[-1]
    return str(env.tokenizer.decode(list(env.trajectory.tokens[turn.action_end:turn.obs_end])))


def test_a_replay_sees_the_same_faults() -> None:
    a, b = (gym.make("agentgym/Lookup-v1", prompt="compact", fail_rate=0.5, depth=4, max_turns=40) for _ in range(2))
    for seed in range(5):
        ra, ta = _play(a, seed)
        rb, tb = _play(b, seed)
        assert ra == rb == 1.0 and list(ta.tokens) == list(tb.tokens)


def test_fault_seed_draws_the_same_task_its_own_faults() -> None:
    """A group's samples (same seed, fault_seed 0..7) meet one chain with different faults; the
    same seed and fault_seed meet the same faults again (a replay)."""
    env = LookupEnv(prompt="compact", depth=3, fail_rate=0.5)

    def faults(seed: int, options: dict[str, Any]) -> tuple[str, tuple[bool, ...]]:
        _, info = env.reset(seed=seed, options=options)
        code, seen = env.task.meta["codes"][0], []
        for _ in range(6):  # the same code again and again: six draws of the service
            env.step(env.codec.tool_call_ids("lookup", {"code": code}))
            seen.append(env.last_failed)
        return info["task_id"], tuple(seen)

    for seed in range(3):
        shared = {faults(seed, {})[1] for _ in range(2)}
        assert len(shared) == 1  # without fault_seed: the seed's faults, every time
        runs = [faults(seed, {"fault_seed": j}) for j in range(8)]
        assert len({t for t, _ in runs}) == 1 and runs[0][0] == faults(seed, {})[0]  # one task
        assert len({f for _, f in runs}) > 1  # 8 x 6 draws at 0.5: the same pattern 8 times has p ~ 1e-13
        assert runs == [faults(seed, {"fault_seed": j}) for j in range(8)]  # replayable
    with pytest.raises(ConfigError, match="fault_seed: expected an int >= 0"):
        env.reset(seed=0, options={"fault_seed": -1})


def test_the_splits_hold_disjoint_chains() -> None:
    env = LookupEnv(prompt="compact", depth=[1, 2])
    ids = {s: {env.reset(seed=i, options={"split": s})[1]["task_id"] for i in range(300)} for s in ("train", "eval")}
    assert ids["train"] and ids["eval"] and not ids["train"] & ids["eval"]
    for s in ("train", "eval"):
        env.reset(seed=1, options={"split": s})
        assert chain_split(env.task.meta["codes"]) == s
    # index: the same task whatever the seed
    t = {env.reset(seed=s, options={"index": 7, "split": "eval"})[1]["task_id"] for s in range(5)}
    assert len(t) == 1


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"depth": 0}, r"depth: expected an int in \[1, 8\]"),
    ({"depth": []}, "non-empty list"),
    ({"fail_rate": 1.0}, r"fail_rate: expected a probability in \[0, 1\)"),
    ({"fail_rate": float("nan")}, "fail_rate"),
])
def test_bad_options_are_one_line_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LookupEnv(**kwargs)


def test_unknown_reset_options_are_refused() -> None:
    env = LookupEnv()
    with pytest.raises(ConfigError, match="unknown option.*'family'"):
        env.reset(seed=0, options={"family": "x"})
    with pytest.raises(ConfigError, match="index: expected an int >= 0"):
        env.reset(seed=0, options={"index": -1})


def test_the_answer_is_exactly_the_code() -> None:
    env = LookupEnv(prompt="compact", depth=1)
    env.reset(seed=0)
    end = env.task.answer
    for answer, paid in ((end, 1.0), (f"{end}.", 1.0), (f" {end} ", 1.0), (f"{end} or 123", 0.0),
                         (f"The code is {end}", 0.0), (json.dumps({"code": end}), 0.0)):
        env.reset(seed=0)
        _, r, _, _, _ = env.step(env.codec.final_ids(answer))
        assert r == paid, answer
    assert np.isfinite(r)


def test_fault_record_reads_what_an_episode_did_after_each_fault() -> None:
    """The oracle calls every failed code again and solves its task; a policy that gives up after
    its first fault (answers the code it has) met one fault, called nothing again and failed; a
    call of another code after a fault is not a retry; no fault, nothing to retry."""
    from agentgym.environments.lookup.recovery import fault_record, fault_summary

    env = LookupEnv(prompt="compact", depth=3, fail_rate=0.5, max_turns=40)
    decode = env.tokenizer.decode
    oracle = []
    for seed in range(8):
        _, traj = _play(env, seed)
        oracle.append(fault_record(traj, decode))
    assert all(r.success and r.retried == r.faults for r in oracle)
    assert sum(r.faults for r in oracle) > 3  # half the calls fail: the seeds met faults

    def give_up(seed: int, after: str) -> Any:
        env.reset(seed=seed)
        while True:
            env.step(oracle_policy(env))
            if UNAVAILABLE in _last_tool_text(env):
                break
        if after == "answer":
            env.step(env.codec.final_ids(env.position))
        else:  # a lookup of another code of the chain, then stop
            other = next(c for c in env.task.meta["codes"] if c != env.position)
            env.step(env.codec.tool_call_ids("lookup", {"code": other}))
        return env.trajectory

    seed = next(s for s in range(50) if not oracle_faultless(env, s))
    r = fault_record(give_up(seed, "answer"), decode)
    assert (r.faults, r.retried, r.success) == (1, 0, False)
    r = fault_record(give_up(seed, "other"), decode)  # the other call may meet a fault of its own
    assert r.faults >= 1 and r.retried == 0 and not r.success
    clean = LookupEnv(prompt="compact", depth=2, fail_rate=0.0)
    _, traj = _play(clean, 0)
    r = fault_record(traj, decode)
    assert (r.faults, r.retried, r.success) == (0, 0, True)
    s = fault_summary([*oracle, fault_record(traj, decode), fault_record(give_up(seed, "answer"), decode)])
    assert s["episodes"] == 10 and s["met_fault"] + s["no_fault"] == 10
    assert s["met_fault_solved"] == s["met_fault"] - 1 and s["faults_retried"] == s["faults"] - 1


def oracle_faultless(env: LookupEnv, seed: int) -> bool:
    """The oracle's episode from ``seed`` met no fault."""
    _, traj = _play(env, seed)
    return sum(1 for t in traj.turns if t.tool) == env.task.meta["depth"]
