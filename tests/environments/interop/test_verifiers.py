"""agentgym/Verifiers-v0: tasksets and multi-turn envs written with verifiers' own classes (the
env's run() playing the user; verifiers' own user-sim with an LLM user), scored by verifiers' own
Task.score over a vf.Trace, played through agentgym-eval and verified by replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.errors import ConfigError
from agentgym.oracles import run_oracle
from tests.environments.interop.conftest import require, write_suite

require("verifiers.v1")  # imported where used: ~5 s that the other xdist workers need not pay


def add_taskset() -> Any:
    from tests.environments.interop.vf_tasksets import add_taskset as make

    return make()

VF = "agentgym/Verifiers-v0"


def test_check_env_oracle_and_rubric_components() -> None:
    env = gym.make(VF, taskset=add_taskset())
    check_env(env.unwrapped, skip_render_check=True)
    t = run_oracle(env, seed=0)
    assert t.total_reward == 1.0
    assert t.turns[-1].components["vf:exact"] == 1.0 and t.turns[-1].components["vf:brief"] == 1.0
    p = env.unwrapped.provenance()
    assert p.replayable and p.oracle


def test_toolset_methods_become_harmony_tools() -> None:
    env = gym.make(VF, taskset=add_taskset())
    u = env.unwrapped
    env.reset(seed=0)
    assert [t.name for t in u.episode_tools] == ["double"]
    assert u.episode_tools[0].parameters["properties"] == {"n": {"type": "integer"}}
    *_, info = env.step(u.codec.tool_call_ids("double", {"n": 21}))
    assert info["tool_result"]["content"] == "42"
    *_, r, term, _, info = env.step(u.codec.final_ids("nope"))
    assert term and r == 0.0 and "verifiers reward 0" in info["tool_result"]["content"]


def test_split_is_refused() -> None:
    with pytest.raises(ConfigError, match="taskset_config"):
        gym.make(VF, taskset=add_taskset(), split="eval")


def test_verifiers_env_plays_through_agentgym_eval_and_verifies(tmp_path: Path) -> None:
    from agentgym.leaderboards.evaluate import run_suite
    from agentgym.leaderboards.policies import make_policy
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import verify_submission

    # A taskset object does not fit in a suite file: the suite names a factory through the env kwargs.
    path = write_suite(tmp_path, "vf", [{"id": VF, "kwargs": {"taskset_factory":
                                                              "tests.environments.interop.vf_tasksets:add_taskset"},
                                         "tasks": [{"index": i} for i in range(3)]}])
    suite = load_suite(path)
    out = run_suite(suite, make_policy("oracle"), tmp_path / "vf.jsonl", name="oracle", policy_name="oracle",
                    workers=1, progress=False)
    rep = verify_submission(out, suite=suite, workers=1)
    assert rep.ok and rep.scores[VF]["mean"] == 1.0, rep.format()


def test_tool_calls_are_recorded_in_the_verifiers_trace_the_rubric_scores() -> None:
    env = gym.make(VF, taskset=add_taskset())
    u = env.unwrapped
    env.reset(seed=0, options={"index": 2})
    env.step(u.codec.tool_call_ids("double", {"n": 2}))
    *_, r, term, _, _ = env.step(u.codec.final_ids("4"))
    trace = u.conv.trace
    assert term and r == 1.0 and trace.ok and trace.stop_condition == "agent_completed"
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trace.tool_messages[0].content == "4" and trace.assistant_messages[0].tool_calls[0].name == "double"


# ---------------------------------------------------------------------------- multi-turn: a vf.Env
def test_a_multi_turn_env_is_played_through_its_own_run(vf_plugins) -> None:
    """verifiers' GuessEnv (tests/.../vf_plugins/vf_guess.py) answers each guess from its run():
    its replies are the user's next messages, its run() and the task's reward make the outcome."""
    env = gym.make(VF, env="vf-guess")
    u = env.unwrapped
    check_env(u, skip_render_check=True)
    p = u.provenance()
    assert not p.replayable and "replayable=True" in p.replay_note and u.seat == "player"
    env.reset(seed=0, options={"index": 0})  # the secret is 3
    assert u.task.prompt.startswith("I am thinking of a number") and u.instructions == "Reply with one number."
    replies = []
    for guess in ("5", "2", "3"):
        obs, r, term, trunc, info = env.step(u.codec.final_ids(guess))
        replies.append(info["tool_result"]["content"])
    assert replies[:2] == ["lower", "higher"] and u.tokenizer.decode(obs) == ""
    assert term and not trunc and r == 1.0 and replies[2] == "verifiers reward 1 (vf:solved=1)"
    assert u.conv.trace.metrics["guesses"] == 3.0  # recorded by GuessEnv.run itself
    env.reset(seed=0, options={"index": 0})
    for guess in ("1", "1", "1"):  # three misses: GuessEnv.run ends the exchange
        *_, r, term, _, _ = env.step(u.codec.final_ids(guess))
    assert term and r == 0.0
    assert run_oracle(env, seed=3).total_reward == 1.0
    env.close()


def test_a_declared_replayable_env_plays_through_agentgym_eval_and_verifies(vf_plugins, tmp_path: Path) -> None:
    from agentgym.leaderboards.evaluate import run_suite
    from agentgym.leaderboards.policies import make_policy
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import verify_submission

    path = write_suite(tmp_path, "guess", [{"id": VF, "kwargs": {"env": "vf-guess", "replayable": True},
                                            "tasks": [{"index": i} for i in range(3)]}])
    suite = load_suite(path)
    out = run_suite(suite, make_policy("oracle"), tmp_path / "guess.jsonl", name="oracle", policy_name="oracle",
                    workers=1, progress=False)
    rep = verify_submission(out, suite=suite, workers=1)
    assert rep.ok and rep.scores[VF]["mean"] == 1.0, rep.format()


def test_a_failing_env_is_an_infrastructure_fault_and_seats_are_checked(vf_plugins) -> None:
    env = gym.make(VF, env="vf-broken")
    u = env.unwrapped
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(u.codec.final_ids("5"))
    assert trunc and not term and r == 0.0 and "the game server went away" in info["infra_error"]
    env.close()
    with pytest.raises(ConfigError, match="did you mean 'player'"):
        gym.make(VF, env="vf-guess", seat="playr")
    with pytest.raises(ConfigError, match="agents_endpoint"):
        gym.make(VF, env="user-sim", env_config={"taskset": {"id": "vf-guess"}})
    with pytest.raises(ConfigError, match="not both"):
        gym.make(VF, env="vf-guess", taskset=add_taskset())


@pytest.mark.slow
def test_verifiers_user_sim_with_an_llm_user_on_loopback(vf_plugins, tiny_server, offline_uv) -> None:
    """verifiers' own user-sim env: its user seat is verifiers' null harness (chat loop installed by
    uv, interception server) sampling agentgym's tiny model on loopback; the policy is the assistant."""
    env = gym.make(VF, env="user-sim", agents_endpoint={"base_url": tiny_server[0], "model": "agentgym"},
                   env_config={"taskset": {"id": "vf-guess"},
                               "user": {"runtime": {"type": "subprocess"}, "max_turns": 2,
                                        "harness": {"id": "null", "env": offline_uv}}})
    u = env.unwrapped
    p = u.provenance()
    assert u.seat == "assistant" and not p.replayable and "['user'] are played by a model" in p.replay_note
    env.reset(seed=0, options={"index": 0})  # the user speaks first: its message is the task
    first = u.task.prompt
    assert u.instructions == "Reply with one number." and u.conv.trace.messages[-1].content == first
    obs, r, term, trunc, info = env.step(u.codec.final_ids("5"))
    assert not term and u.tokenizer.decode(obs).startswith("<|start|>user<|message|>")  # the user's 2nd message
    *_, r, term, trunc, info = env.step(u.codec.final_ids("3"))  # the user's max_turns ends the talk
    assert term and r == 1.0 and u.conv.trace.metrics["user_turns"] == 2.0  # UserSimEnv.finalize's metric
    env.close()
