"""Suites are versioned by content; the statistics match hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from agentgym.errors import ConfigError
from agentgym.leaderboards.policies import POLICIES, make_policy
from agentgym.leaderboards.stats import env_summary, overall_summary, pass_hat_k, wilson
from agentgym.leaderboards.suite import SUITES_DIR, episode_seed, load_suite, suite_hash

from .conftest import SMALL, write_suite


def test_core_suite_loads_and_covers_the_four_envs() -> None:
    core = load_suite("core")
    assert core.version == suite_hash(yaml.safe_load((SUITES_DIR / "core.yaml").read_text()))
    assert [e.id for e in core.envs] == ["agentgym/Math-v1", "agentgym/MathTool-v1", "agentgym/CodeFix-v1",
                                         "agentgym/WebAPI-v1"]
    eps = list(core.episodes())
    assert len(eps) == sum(len(e.tasks) for e in core.envs) * core.trials
    assert len({e.seed for e in eps}) == len(eps)  # every trial its own seed
    e = eps[7]
    assert core.trial_of_seed(e.env.id, e.task, e.seed) == e.trial


def test_a_changed_suite_is_a_new_version(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, SMALL)
    path = tmp_path / "small.yaml"
    content = yaml.safe_load(path.read_text())
    content["envs"][0]["tasks"].append({"index": 9})  # edited, version left as it was
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(ConfigError, match=r"declares version '\w+' but its content hashes to '\w+'.*new version"):
        load_suite(path)
    content["version"] = suite_hash(content)
    path.write_text(yaml.safe_dump(content))
    assert load_suite(path).version != suite.version
    content["description"] = "reworded"  # free text is not part of the version
    path.write_text(yaml.safe_dump(content))
    assert load_suite(path).version == content["version"]


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.update(extra=1), "unknown suite keys"),
    (lambda c: c.update(trials=0), "trials must be a positive int"),
    (lambda c: c["envs"][0]["kwargs"].update(tokenizer="x"), "must not fix the tokenizer"),
    (lambda c: c["envs"][0]["tasks"].append({"index": 0}), "lists a task twice"),
    (lambda c: c["sampling"].update(top_p=0.9), "sampling knows only"),
])
def test_bad_suites_are_refused(tmp_path: Path, edit, match: str) -> None:  # type: ignore[no-untyped-def]
    import copy

    content = copy.deepcopy(SMALL)
    edit(content)
    with pytest.raises(ConfigError, match=match):
        write_suite(tmp_path, content)


def test_seeds_depend_on_the_task_not_its_position() -> None:
    a = episode_seed(0, "agentgym/Math-v1", {"index": 3}, 1)
    assert a == episode_seed(0, "agentgym/Math-v1", {"index": 3}, 1)
    assert a != episode_seed(0, "agentgym/Math-v1", {"index": 3}, 2)
    assert a != episode_seed(1, "agentgym/Math-v1", {"index": 3}, 1)
    assert 0 <= a < 2**31


def test_wilson_known_values() -> None:
    lo, hi = wilson(0.5, 100)
    assert math.isclose(lo, 0.4038, abs_tol=1e-4) and math.isclose(hi, 0.5962, abs_tol=1e-4)
    lo, hi = wilson(0.0, 10)
    assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
    assert wilson(1.0, 10)[1] == 1.0


def test_pass_hat_k() -> None:
    # C(2,2)/C(3,2) = 1/3; C(1,2) = 0; C(0,2) = 0 -> mean 1/9
    assert math.isclose(pass_hat_k([2, 1, 0], [3, 3, 3], 2), 1 / 9)
    assert pass_hat_k([3, 3], [3, 3], 3) == 1.0
    assert pass_hat_k([1], [3], 1) == pytest.approx(1 / 3)


def test_env_summary_uses_tasks_as_the_unit() -> None:
    # Perfectly correlated trials: as informative as one trial per task.
    corr = env_summary({0: [1, 1, 1], 1: [0, 0, 0], 2: [1, 1, 1], 3: [0, 0, 0]}, 3)
    one = env_summary({0: [1], 1: [0], 2: [1], 3: [0]}, 1)
    assert corr["mean"] == 0.5 and corr["ci95"] == pytest.approx(one["ci95"])
    # Independent-looking trials: the interval narrows towards the episode count.
    mixed = env_summary({0: [1, 0, 1], 1: [0, 1, 0], 2: [1, 0, 0], 3: [0, 1, 1]}, 3)
    assert mixed["ci95"][1] - mixed["ci95"][0] < corr["ci95"][1] - corr["ci95"][0]
    assert corr["pass_k"] == 0.5 and mixed["pass_k"] == 0.0
    all_one = env_summary({i: [1, 1] for i in range(10)}, 2)
    assert all_one["ci95"] == pytest.approx(list(wilson(1.0, 10)))


def test_overall_is_the_macro_average() -> None:
    a = env_summary({0: [1, 1], 1: [1, 0]}, 2)
    b = env_summary({i: [0, 0] for i in range(6)}, 2)
    o = overall_summary({"a": a, "b": b})
    assert o["mean"] == pytest.approx((0.75 + 0.0) / 2)
    assert o["episodes"] == 16 and o["tasks"] == 8
    assert 0 <= o["ci95"][0] <= o["mean"] <= o["ci95"][1] <= 1


def test_policy_registry() -> None:
    assert {"oracle", "do-nothing", "hf", "vllm", "openai-http", "openai-chat"} <= set(POLICIES)
    assert POLICIES["openai-chat"] == "agentgym.chat.policy:OpenAIChatPolicy"
    with pytest.raises(ConfigError, match="Did you mean 'oracle'"):
        make_policy("oracel")
    with pytest.raises(ConfigError, match="does not take these arguments"):
        make_policy("oracle", bogus=1)
    assert make_policy("just-answer", {"temperature": 1.0}).describe()["answer"] == "Done."


def test_leaderboard_modules_do_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, agentgym.leaderboards.verify, agentgym.leaderboards.evaluate, agentgym.leaderboards.board, "
            "agentgym.leaderboards.validate, agentgym.leaderboards.cli, agentgym.leaderboards.policies; "
            "print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
