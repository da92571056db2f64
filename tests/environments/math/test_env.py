"""Math-v1 and MathCalc-v1: the gym contract, oracles, scoring, determinism, options, splits, datasets."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.math.calc import MathCalcEnv
from agentgym.environments.math.env import MathEnv
from agentgym.environments.math.generators import FAMILIES, LEVELS
from agentgym.environments.math.oracle import oracle_action, oracle_actions
from agentgym.errors import ConfigError, DatasetError, EnvStateError


@pytest.mark.parametrize("env_id", ["agentgym/Math-v1", "agentgym/MathCalc-v1"])
def test_check_env(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
    env.close()  # idempotent


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("level", LEVELS)
def test_oracle_solves_every_family_and_level(family: str, level: str) -> None:
    env = MathEnv(families=[family], levels=[level])
    for seed in range(40):
        split = "eval" if seed % 4 == 0 else "train"
        _, info = env.reset(seed=seed, options={"split": split})
        obs, reward, term, trunc, out = env.step(oracle_action(env))
        assert (reward, term, trunc) == (1.0, True, False), (env.task, out)
        assert obs.size == 0
        assert env.task is not None and env.task.id.startswith(f"math/{family}/")
        assert info["split"] == env.task.meta["split"] == split and env.task.meta["level"] == level


@pytest.mark.parametrize("family", list(FAMILIES))
def test_wrong_and_empty_answers_score_zero(family: str) -> None:
    env = MathEnv(families=[family])
    for seed in range(10):
        env.reset(seed=seed)
        _, reward, term, _, info = env.step(env.codec.final_ids("I do not know"))
        assert reward == 0.0 and term
        assert info["tool_result"]["content"].startswith(("unparseable", "not equivalent", "not_final_form"))
        env.reset(seed=seed)
        _, reward, term, _, _ = env.step(env.codec.final_ids("123456789"))
        assert reward == 0.0 and term


def test_do_nothing_policy_scores_zero() -> None:
    env = MathEnv(max_turns=3)
    env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, info = env.step(np.asarray(env.tokenizer.encode("hmm"), dtype=np.int64))
        total += r
        done = term or trunc
    assert total == 0.0 and trunc and not term
    assert info["counts"]["malformed"] == 3


def test_boxed_answer_in_final_channel() -> None:
    env = MathEnv(families="arithmetic")
    env.reset(seed=3)
    assert env.task is not None
    text = f"The sum is \\boxed{{{env.task.answer}}}."
    _, reward, *_ = env.step(env.codec.final_ids(text, analysis="add the numbers"))
    assert reward == 1.0


def test_determinism_same_seed_same_tokens() -> None:
    a, b = MathEnv(), MathEnv()
    for seed in range(50):
        oa, ia = a.reset(seed=seed)
        ob, ib = b.reset(seed=seed)
        assert np.array_equal(oa, ob) and ia == ib
    prompts = {MathEnv().reset(seed=s)[1]["prompt"] for s in range(50)}
    assert len(prompts) > 40  # different seeds, different problems


def test_reset_options_pick_a_task() -> None:
    env = MathEnv()
    _, info = env.reset(seed=1, options={"family": "quadratic", "level": "hard", "index": 7})
    _, info2 = env.reset(seed=2, options={"family": "quadratic", "level": "hard", "index": 7})
    assert info == info2 and info["task_id"].startswith("math/quadratic/")
    _, info3 = env.reset(seed=1, options={"family": "quadratic", "level": "hard", "index": 8})
    assert info3 != info
    env.reset(seed=5, options={"level": "easy"})
    assert env.task is not None and env.task.meta["level"] == "easy"
    with pytest.raises(ConfigError, match="did you mean 'quadratic'"):
        env.reset(options={"family": "quadratics"})
    with pytest.raises(ConfigError, match="unknown reset option"):
        env.reset(options={"famly": "quadratic"})
    with pytest.raises(ConfigError):
        env.reset(options={"index": -1})


def test_constructor_validates() -> None:
    with pytest.raises(ConfigError, match="did you mean 'derivative'"):
        MathEnv(families=["derivatives"])
    with pytest.raises(ConfigError):
        MathEnv(levels=["extreme"])
    with pytest.raises(ConfigError):
        MathEnv(families=[])
    with pytest.raises(EnvStateError):
        MathEnv().step(np.array([1, 2, 3]))


def test_shaped_mode_gives_format_credit_on_a_correct_answer_only() -> None:
    env = MathEnv(reward_mode="shaped", families="arithmetic")
    env.reset(seed=0)
    _, r_ok, _, _, info = env.step(oracle_action(env))
    assert info["reward_components"]["format"] == 1.0
    assert r_ok == pytest.approx(1.0 + 0.1 - 0.01)
    env.reset(seed=0)
    _, r_bad, _, _, info = env.step(env.codec.final_ids("nope"))
    # a wrong answer earns nothing, well-formed or not (it used to earn +0.09, more than trying)
    assert r_bad == 0.0 and info["reward_components"]["outcome"] == 0.0 and info["reward_components"]["format"] == 1.0


def test_trajectory_records_the_episode() -> None:
    env = gym.make("agentgym/Math-v1")
    obs, _ = env.reset(seed=4)
    action = oracle_action(env)
    env.step(action)
    traj = env.unwrapped.trajectory
    assert traj.tokens == obs.tolist() + action.tolist()
    assert traj.total_reward == 1.0 and traj.terminated and traj.task_id == env.unwrapped.task.id


# ---------------------------------------------------------------------------- datasets
def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "probs.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_dataset_loads_and_scores(tmp_path: Path) -> None:
    rows = [{"id": "q1", "question": "What is 2 + 2?", "answer": "4", "split": "train"},
            {"id": "q2", "question": "Roots of x^2 - 1?", "answer": "-1, 1", "split": "train"},
            {"id": "q3", "question": "Half of one?", "answer": 0.5, "split": "train"},
            {"id": "q4", "question": "What is 3 + 3?", "answer": "6", "split": "eval"}]
    path = _write(tmp_path, [json.dumps(r) for r in rows] + [""])
    env = gym.make("agentgym/Math-v1", dataset=str(path))
    _, info = env.reset(seed=0, options={"index": 1})
    assert info == {"task_id": "q2", "prompt": "Roots of x^2 - 1?", "split": "train"}
    assert env.unwrapped.problem.form == "set[number]"  # inferred from the reference
    _, r, *_ = env.step(env.unwrapped.codec.final_ids("x = 1 or x = -1"))
    assert r == 1.0
    env.reset(seed=0, options={"index": 2})
    assert env.step(env.unwrapped.codec.final_ids("\\frac{1}{2}"))[1] == 1.0
    env.reset(seed=0, options={"index": 0})
    assert env.step(env.unwrapped.codec.final_ids("2 + 2"))[1] == 0.0  # the question, restated
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(30)}
    assert seen == {"q1", "q2", "q3"}
    assert {env.reset(seed=s, options={"split": "eval"})[1]["task_id"] for s in range(5)} == {"q4"}
    with pytest.raises(ConfigError):
        env.reset(options={"index": 3})
    with pytest.raises(ConfigError):
        env.reset(options={"family": "arithmetic"})
    with pytest.raises(ConfigError, match="did you mean 'eval'"):
        env.reset(options={"split": "evl"})


@pytest.mark.parametrize(("lines", "match"), [
    (['{"id": "a", "question": "q", "answer": "1"}', "{not json"], r":2: not valid JSON"),
    (['{"id": "a", "question": "q"}'], r":1: missing key\(s\) \['answer'\]"),
    (['[1, 2]'], r":1: expected a JSON object"),
    (['{"id": "a", "question": "", "answer": "1"}'], r":1: 'question' must be a non-empty string"),
    (['{"id": "a", "question": "q", "answer": "1"}', '', '{"id": "a", "question": "r", "answer": "2"}'],
     r":3: duplicate id 'a' \(first on line 1\)"),
    ([""], "no problems"),
    (['{"id": "a", "question": "q", "answer": "1"}', '{"id": "b", "question": "q", "answer": "1"}'],
     r":2: the question of line 1 again"),
    (['{"id": "a", "question": "q", "answer": "1", "split": "test"}'], r":1: 'split' must be one of"),
    (['{"id": "a", "question": "q", "answer": "1", "form": "integr"}'], r"did you mean 'integer'"),
    (['{"id": "a", "question": "q", "answer": "6/4", "form": "fraction"}'], r"not in lowest terms"),
    (['{"id": "a", "question": "q", "answer": "x + 1", "form": "simplified", "expression": "x+1"}'],
     r"restates the question"),
])
def test_dataset_errors_name_the_line(tmp_path: Path, lines: list[str], match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        MathEnv(dataset=_write(tmp_path, lines))


def test_a_dataset_is_parsed_once_and_again_when_it_changes(tmp_path: Path) -> None:
    from agentgym.environments.math import dataset

    path = _write(tmp_path, ['{"id": "a", "question": "q", "answer": "1"}'])
    first = dataset.load_dataset(path)
    hits = dataset._parsed.cache_info().hits
    assert dataset.load_dataset(str(path)) == first and dataset._parsed.cache_info().hits == hits + 1
    path.write_text('{"id": "a", "question": "q", "answer": "12"}\n', encoding="utf-8")  # another size
    assert [p.answer for p in dataset.load_dataset(path)] == ["12"]
    path.write_text("{broken\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=":1: not valid JSON"):
        dataset.load_dataset(path)


def test_dataset_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        MathEnv(dataset=tmp_path / "nope.jsonl")


# ---------------------------------------------------------------------------- MathCalc
def test_calc_oracle_uses_the_tool_then_answers() -> None:
    env = gym.make("agentgym/MathCalc-v1")
    for seed in range(100):
        obs, info = env.reset(seed=seed)
        assert len(info["prompt"]) < 40  # short questions for a tiny model
        _, r1, term, trunc, info1 = env.step(oracle_actions(env))
        assert (r1, term, trunc) == (0.0, False, False)
        assert info1["tool_call"]["name"] == "calculator"
        assert info1["tool_result"]["content"] == env.unwrapped.task.answer
        _, r2, term, _, _ = env.step(oracle_actions(env))
        assert r2 == 1.0 and term


@pytest.mark.parametrize("family", list(FAMILIES))
def test_calc_oracle_on_every_family(family: str) -> None:
    env = MathCalcEnv(families=[family], levels=None)
    for seed in range(10):
        env.reset(seed=seed)
        done, total = False, 0.0
        while not done:
            _, r, term, trunc, _ = env.step(oracle_actions(env))
            total += r
            done = term or trunc
        assert total == 1.0


def test_calculator_errors_are_observations() -> None:
    env = MathCalcEnv()
    env.reset(seed=0)
    call = env.codec.tool_call_ids("calculator", {"expression": "2**2**2**99"})
    obs, r, term, trunc, info = env.step(call)
    assert not term and info["tool_result"]["error"] == "too_large"
    assert "too_large" in env.tokenizer.decode(obs)
    _, _, _, _, info = env.step(env.codec.tool_call_ids("calculator", {"expression": "import os"}))
    assert info["tool_result"]["error"] == "bad_expression"
    _, _, _, _, info = env.step(env.codec.tool_call_ids("calculator", {"expr": "1"}))
    assert info["tool_result"]["error"] == "bad_arguments"


def test_oracle_needs_reset() -> None:
    with pytest.raises(EnvStateError):
        oracle_action(MathEnv())


def test_envpool_threads_step_math_envs() -> None:
    """Envs stepped from worker threads: the verifier (no signals) works off the main thread."""
    from agentgym.vector import EnvPool

    pool = EnvPool(lambda: MathCalcEnv(families=None, levels=None), n=4)
    try:
        for round_ in range(3):
            pool.reset([round_ * 10 + i for i in range(4)])
            live = set(range(4))
            rewards = [0.0] * 4
            while live:
                out = pool.step({i: oracle_actions(pool.envs[i]) for i in live})
                for i, res in out.items():
                    rewards[i] += res.reward
                    if res.terminated or res.truncated:
                        live.discard(i)
            assert rewards == [1.0] * 4
    finally:
        pool.close()


def test_the_docs_example_is_what_seed_0_gives() -> None:
    env = gym.make("agentgym/Math-v1", families=["quadratic"], levels=["hard"])
    _, info = env.reset(seed=0)
    page = (Path(__file__).parents[3] / "docs" / "environments" / "math.md").read_text()
    assert f'info["prompt"]: "{info["prompt"][:40]}' in page
