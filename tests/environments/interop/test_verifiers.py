"""agentgym/Verifiers-v0: a taskset written with verifiers' own classes, scored by verifiers' own
Task.score over a vf.Trace, played through agentgym-eval and verified by replay."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.errors import ConfigError
from agentgym.oracles import run_oracle
from tests.environments.interop.conftest import write_suite

pytest.importorskip("verifiers.v1", reason="pip install 'agentgym-suite[interop]'")

from tests.environments.interop.vf_tasksets import add_taskset  # noqa: E402

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
