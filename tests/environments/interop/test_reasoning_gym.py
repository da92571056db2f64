"""agentgym/ReasoningGym-v0 with reasoning-gym's real datasets and score_answer."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.errors import ConfigError
from agentgym.leaderboards.validate import validate_env
from agentgym.oracles import run_oracle
from tests.environments.interop.conftest import require

require("reasoning_gym")

RG = "agentgym/ReasoningGym-v0"


def test_passes_check_env_and_its_oracle_solves() -> None:
    env = gym.make(RG, dataset="basic_arithmetic")
    check_env(env.unwrapped, skip_render_check=True)
    for seed in range(5):
        assert run_oracle(env, seed=seed).total_reward == 1.0
    env.close()


def test_interop_ids_are_registered_but_not_builtins() -> None:
    assert RG in gym.registry and RG not in agentgym.registered_ids()


def test_scored_by_reasoning_gyms_own_score_answer() -> None:
    import reasoning_gym

    env = gym.make(RG, dataset="chain_sum", config={"size": 50})
    u = env.unwrapped
    env.reset(seed=3)
    src = reasoning_gym.create_dataset("chain_sum", seed=0, size=50)
    entry = src[u.task.meta["index"]]
    assert entry["question"] == u.task.prompt
    *_, r, term, _, info = env.step(u.codec.final_ids(str(int(entry["answer"]) + 1)))
    assert term and r == 0.0 and "score_answer: 0" in info["tool_result"]["content"]


def test_splits_are_disjoint_and_honoured_as_kwarg_and_option() -> None:
    env = gym.make(RG, dataset="basic_arithmetic", split="eval")
    u = env.unwrapped
    seen = {s: {u._split_positions(s)[i] for i in range(len(u._split_positions(s)))} for s in u.splits}
    assert not (seen["train"] & seen["eval"]) and not (seen["eval"] & seen["test"])
    assert sum(len(v) for v in seen.values()) == len(u.source)
    env.reset(seed=0)
    assert u.task.meta["split"] == "eval" and u.task.meta["index"] in seen["eval"]
    env.reset(seed=0, options={"split": "test", "index": 0})
    assert u.task.meta["index"] == u._split_positions("test")[0]
    with pytest.raises(ConfigError, match="split"):
        gym.make(RG, dataset="basic_arithmetic", split="validation")


def test_unknown_dataset_and_config_field_say_what_is_known() -> None:
    with pytest.raises(ConfigError, match="did you mean 'basic_arithmetic'"):
        gym.make(RG, dataset="basic_arithmetc")
    with pytest.raises(ConfigError, match="min_terms"):
        gym.make(RG, dataset="basic_arithmetic", config={"min_term": 2})


@pytest.mark.parametrize("answer", ["", "Done.", "I cannot help with that."])
def test_game_of_life_halting_pays_for_not_attempting_and_the_guard_fixes_it(answer: str) -> None:
    # reasoning-gym's game_of_life_halting scores "Done." as correct: the source's problem.
    raw = gym.make(RG, dataset="game_of_life_halting", config={"size": 20})
    guarded = gym.make(RG, dataset="game_of_life_halting", config={"size": 20}, no_attempt_guard=True)
    scores = []
    for env in (raw, guarded):
        env.reset(seed=0)
        scores.append(env.step(env.unwrapped.codec.final_ids(answer))[1])
    assert scores[1] == 0.0
    if answer:
        assert scores[0] == 1.0


def test_validate_names_the_source_as_the_culprit() -> None:
    rep = validate_env(RG, {"dataset": "game_of_life_halting", "config": {"size": 20}}, max_tasks=4, workers=1)
    text = rep.format()
    assert not rep.ok and "imported from reasoning-gym 0.1.25 (game_of_life_halting): replayable" in text
    assert "source env's problem" in text and "no_attempt_guard=True" in text
    good = validate_env(RG, {"dataset": "basic_arithmetic"}, max_tasks=6, workers=1)
    assert good.ok, good.format()


def test_a_submission_on_reasoning_gym_verifies_by_replay_and_tampering_is_caught(tmp_path: Path) -> None:
    from agentgym.leaderboards.evaluate import run_suite
    from agentgym.leaderboards.policies import make_policy
    from agentgym.leaderboards.submission import read_raw
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import verify_submission
    from tests.environments.interop.conftest import write_suite

    path = write_suite(tmp_path, "rg", [{"id": RG, "kwargs": {"dataset": "basic_arithmetic", "split": "eval"},
                                         "tasks": [{"index": i} for i in range(4)]}])
    suite = load_suite(path)
    out = run_suite(suite, make_policy("oracle"), tmp_path / "sub.jsonl", name="oracle", policy_name="oracle",
                    workers=1, progress=False)
    rep = verify_submission(out, suite=suite, workers=1)
    assert rep.ok, rep.format()
    assert rep.scores[RG]["mean"] == 1.0
    raw = read_raw(out)
    assert raw.episodes
