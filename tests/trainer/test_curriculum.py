"""The adaptive curriculum: starts easy, promotes when the frontier's success crosses the
threshold, keeps reviewing passed levels, is deterministic and resumable, and drives the
trainer's task levels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.config import load_config
from agentgym.trainer.curriculum import CurriculumConfig, CurriculumSampler
from agentgym.trainer.train import Trainer

LEVELS = ["easy", "medium", "hard"]


def sampler(**kw: Any) -> CurriculumSampler:
    return CurriculumSampler(CurriculumConfig(levels=list(LEVELS), **kw), seed=3)


def test_promotes_when_the_frontier_window_crosses_the_threshold() -> None:
    s = sampler(promote_at=0.75, window=8)
    assert s.task_levels(0, 16) == ["easy"] * 16  # nothing passed yet: no review draws
    assert not s.update(1, ["easy"] * 4, [1.0] * 4)  # 4/4, but the window is not full
    assert s.update(2, ["easy"] * 4, [0.0, 1.0, 1.0, 0.0])  # 6/8 = 0.75: passed
    assert s.frontier == 1 and s.promotions == [2]
    assert set(s.task_levels(3, 64)) == {"easy", "medium"}


def test_window_holds_the_latest_outcomes_of_the_frontier_only() -> None:
    s = sampler(promote_at=0.75, window=8)
    assert not s.update(1, ["easy"] * 8, [0, 0, 1, 1, 1, 1, 1, 0])  # 5/8
    assert s.metrics() == {"curriculum_level": 0.0, "curriculum_success": 0.625}
    # outcomes of other levels do not count towards the frontier
    assert not s.update(2, ["medium"] * 8, [1.0] * 8)
    assert s.update(3, ["easy", "easy"], [1.0, 1.0])  # latest 8: 1,1,1,1,1,0,1,1 = 7/8
    assert s.frontier == 1 and s.level == "medium" and s.promotions == [3]
    assert s.recent == []  # the new frontier starts with an empty window


def test_threshold_is_inclusive_and_the_last_level_stays() -> None:
    s = sampler(promote_at=0.5, window=2)
    assert s.update(1, ["easy", "easy"], [1.0, 0.0])  # 0.5 >= 0.5
    assert s.update(2, ["medium", "medium"], [1.0, 1.0])
    assert s.level == "hard"
    assert not s.update(3, ["hard", "hard"], [1.0, 1.0])  # nothing above the last level
    assert s.promotions == [1, 2]


def test_review_mixes_in_passed_levels_only() -> None:
    s = sampler(review=0.25)
    s.frontier = 2
    levels = [lv for step in range(200) for lv in s.task_levels(step, 8)]
    share = {lv: levels.count(lv) / len(levels) for lv in LEVELS}
    assert 0.70 < share["hard"] < 0.80  # 1 - review
    assert 0.09 < share["easy"] < 0.16 and 0.09 < share["medium"] < 0.16  # review, uniform
    s.frontier = 1
    assert "hard" not in {lv for step in range(50) for lv in s.task_levels(step, 8)}


def test_draws_are_a_function_of_seed_and_step_and_state_round_trips() -> None:
    a, b = sampler(), sampler()
    a.frontier = b.frontier = 2
    assert a.task_levels(7, 16) == b.task_levels(7, 16)
    assert len({tuple(a.task_levels(step, 16)) for step in range(5)}) > 1
    a.update(4, ["hard"] * 3, [1.0, 0.0, 1.0])
    c = sampler()
    c.load_state_dict(a.state_dict())
    assert c.state_dict() == a.state_dict() and c.task_levels(11, 8) == a.task_levels(11, 8)
    assert a.task_options(5, 2, {"family": "arithmetic"})[0]["family"] == "arithmetic"


@pytest.mark.parametrize("override, match", [
    ("curriculum.levels=[easy, easy]", "distinct"),
    ("curriculum.promote_at=0", "promote_at"),
    ("curriculum.window=0", "window"),
    ("curriculum.review=1.0", "review"),
])
def test_bad_settings_are_config_errors(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config("cpu-quickstart", [override])


SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
         "log.eval_every=0", "sft.steps=0", "env.max_action_tokens=8", "rollout.tasks_per_step=4",
         "rollout.samples_per_task=2", "env.id=agentgym/Math-v1", "env.max_turns=1",
         "env.kwargs={families: [arithmetic]}", "curriculum.levels=[easy, medium, hard]",
         "curriculum.review=0.5", "log.checkpoint_every=1"]


def test_trainer_draws_each_task_at_the_samplers_level_and_resumes_it(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1"])
    trainer = Trainer(cfg)
    trainer.rollouts.curriculum.frontier = 2  # as if easy and medium had been passed
    expected = trainer.rollouts.curriculum.task_levels(0, 4)
    assert len(set(expected)) > 1  # this step mixes levels (seeded)
    trajs: list[Any] = []
    collect = trainer.rollouts.collector.collect

    def spy(*a: Any, **kw: Any) -> Any:
        out = collect(*a, **kw)
        trajs.extend(out[0])
        return out

    trainer.rollouts.collector.collect = spy  # type: ignore[method-assign]
    m = trainer.train_step(0)
    got = [t.traj.meta["options"]["level"] for t in trajs]  # the reset option each episode was drawn with
    assert got == [lv for lv in expected for _ in range(2)]  # the group shares its task's level
    assert m["curriculum_level"] == 2.0
    trainer.step = 1
    trainer._checkpoint()
    resumed = Trainer(load_config(tmp_path / "config.yaml", [f"log.run_dir={tmp_path}"]), resume=True)
    assert resumed.rollouts.curriculum.state_dict() == trainer.rollouts.curriculum.state_dict()


def test_codefix_takes_the_level_as_a_reset_option() -> None:
    import gymnasium as gym
    import numpy as np

    env = gym.make("agentgym/CodeFix-v1", split="train", sandbox="unsafe-local").unwrapped
    rng = np.random.default_rng(0)
    for level in (1, 2, 3):
        assert {env.sample_task(rng, {"level": level}).meta["level"] for _ in range(8)} == {level}
    with pytest.raises(ConfigError, match="no task of split='train' at that level"):
        env.sample_task(rng, {"level": 7})
    env.close()
