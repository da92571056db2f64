"""Held-out problems: evaluation runs on distinct problems of the eval split, training never
draws one of them (the env's splits, or the trainer's own exclusion), and a broken promise stops
the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the environments)
from agentgym.environments.math.calc import MathCalcEnv
from agentgym.errors import TrainerError
from agentgym.trainer.config import load_config
from agentgym.trainer.episodes import held_out
from agentgym.trainer.rollout.demos import demonstrations, find_oracle
from agentgym.trainer.rollout.heldout import distinct_problems, task_id_at
from agentgym.trainer.train import Trainer

SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "controls=[]",
         "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=8", "ppo.steps=1",
         "log.eval_episodes_final=0", "sft.check_every=0", "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null"]


def test_evaluation_problems_are_distinct_task_ids_not_seeds() -> None:
    env = gym.make("agentgym/MathCalc-v1")
    ids = [task_id_at(env, s, {}) for s in range(300)]
    assert len(set(ids)) < 300  # the easy arithmetic generator repeats problems across seeds
    got = distinct_problems(env, 200, options={})
    assert len(got) == 200 and len({t for _, t in got}) == 200
    assert [s for s, _ in got][:3] == [0, 1, 2] and got[-1][0] > 199  # repeats were skipped
    env.close()


# The env is not asked for splits (it then draws every problem from its default split): the
# trainer must keep the held-out problems out itself, or report that it did not.
NO_SPLITS = ["env.train_split=null", "env.eval_split=null"]


def test_exclusion_keeps_held_out_problems_out_of_demos_and_rl_tasks(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "log.eval_episodes=64", *NO_SPLITS,
                                         "env.exclude_held_out=true"])
    assert cfg.env.exclude_held_out and cfg.env.train_split is None
    t = Trainer(cfg)
    held = t.rollouts.held
    assert len(held.eval) == 64 and len(set(held.eval_ids())) == 64
    # seeds the held-out problems were drawn at, as training seeds: each is replaced
    probe = gym.make("agentgym/MathCalc-v1", prompt="compact", max_turns=2, max_action_tokens=16)
    first = held.eval_seeds()[:8]
    replaced = held.train_seeds(first, [{}] * 8)
    assert all(r != s and (r - s) % 10_000_019 == 0 for r, s in zip(replaced, first))
    assert not any(held.is_held_out(task_id_at(probe, r, {})) for r in replaced)
    demos = demonstrations(probe, find_oracle("agentgym/MathCalc-v1"), first, {}, held)
    assert not any(held.is_held_out(d.task_id) for d in demos) and held.overlap(demos, "test") == 0
    # one PPO step on training seeds: none of its episodes draws a held-out problem
    m = t.train_step(0)
    assert m["held_out_overlap"] == 0
    probe.close()
    t.close()


def test_without_splits_or_exclusion_overlap_is_counted_and_reported(tmp_path: Path) -> None:
    from agentgym.trainer.evaluation import report_lines

    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", *NO_SPLITS, "env.exclude_held_out=false",
                                         "log.eval_every=1", "log.eval_episodes=16"])
    t = Trainer(cfg)
    held = t.rollouts.held
    trajs = demonstrations(gym.make("agentgym/MathCalc-v1"), find_oracle("agentgym/MathCalc-v1"),
                           held.eval_seeds()[:3], {})
    assert held.overlap(trajs, "test") == 3  # counted, not an error: no split was promised
    t.run()
    lines = report_lines(str(tmp_path))
    assert any(line.startswith("held out: 16 distinct evaluation problems (no splits") for line in lines)


class IgnoresSplit(MathCalcEnv):
    """Takes ``split`` and ignores it: the bug the overlap guard exists for."""

    def __init__(self, *, split: str = "train", **kw: Any) -> None:
        super().__init__(**kw)

    def sample_task(self, rng: Any, options: dict[str, Any]) -> Any:
        return super().sample_task(rng, {k: v for k, v in options.items() if k != "split"})


def test_an_env_that_ignores_its_split_stops_the_run(tmp_path: Path) -> None:
    import json

    data = tmp_path / "ten.jsonl"  # ten problems: eval takes eight, so training must draw one
    data.write_text("".join(json.dumps({"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(10)))
    gym.register("agentgym/IgnoresSplit-v0", entry_point=IgnoresSplit)
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / 'run'}",
                                         "env.id=agentgym/IgnoresSplit-v0", f"env.kwargs={{dataset: {data}}}",
                                         "env.train_split=train", "env.eval_split=eval",
                                         "env.exclude_held_out=false"])
    t = Trainer(cfg)
    assert t.rollouts.held.splits and len(t.rollouts.held.eval) == 8
    with pytest.raises(TrainerError, match=r"drew held-out problems.*ignores its split"):
        t.train_step(0)
    t.close()


def _split_run(env_id: str, tmp_path: Path, extra: list[str]) -> tuple[Trainer, list[Any]]:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", f"env.id={env_id}",
                                         "env.train_split=train", "env.eval_split=eval",
                                         "env.exclude_held_out=false", "env.max_tokens=8192", *extra])
    t = Trainer(cfg)
    trajs, _, _ = t.rollouts.collect(0)
    return t, trajs


def test_codefix_trains_on_train_and_evaluates_on_eval(tmp_path: Path) -> None:
    """CodeFix-v1 has fixed train / eval splits: the trainer's evaluation problems are all eval
    tasks, its training tasks all train tasks."""
    from agentgym.environments.codefix.tasks import select_tasks

    t, trajs = _split_run("agentgym/CodeFix-v1", tmp_path, ["env.kwargs={sandbox: unsafe-local}",
                                                             "env.max_turns=1"])
    train_ids = {x.id for x in select_tasks("train", None)}
    eval_ids = {x.id for x in select_tasks("eval", None)}
    assert set(t.rollouts.held.eval_ids()) <= eval_ids and len(t.rollouts.held.eval) == 8
    assert trajs and all(x.traj.task_id in train_ids for x in trajs)
    t.close()


@pytest.mark.parametrize("env_id", ["agentgym/Math-v1", "agentgym/MathCalc-v1", "agentgym/MathTool-v1"])
def test_math_envs_train_on_train_and_evaluate_on_eval(env_id: str, tmp_path: Path) -> None:
    t, trajs = _split_run(env_id, tmp_path, ["log.eval_episodes=64"])
    assert t.rollouts.held.splits and len(set(t.rollouts.held.eval_ids())) == 64
    assert trajs and not any(t.rollouts.held.is_held_out(x.traj.task_id) for x in trajs)
    eval_env = t.rollouts.make_env("eval")
    train_ids = {task_id_at(eval_env, s, {"split": "train"}) for s in range(2000)}
    assert not train_ids & set(t.rollouts.held.eval_ids())  # disjoint problem sets, drawn both ways
    t.close()


def test_held_out_sets_are_a_pure_function_of_the_config(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "sft.steps=10", "sft.check_every=5", "sft.check_from=0",
                                         "sft.check_problems=16"])
    from agentgym.trainer.episodes import Rollouts
    from agentgym.trainer.learner import Learner

    s = Rollouts(cfg, Learner(cfg))
    a, b = held_out(cfg, s.make_env), held_out(cfg, s.make_env)
    assert a.eval == b.eval and a.check == b.check and len(a.check) == 16
    assert not set(a.eval_ids()) & {tid for _, tid in a.check}  # stopping on check never scores on eval
    s.close()


def test_a_measurement_from_another_seed_start_never_scores_a_tuning_problem(tmp_path: Path) -> None:
    # MathCalc-v1's eval split repeats problems across seeds: from 1,000,000 up alone, ~1 in 6 of
    # the first 256 would be problems a run from 0 (where the recipe was tuned) evaluated on
    from agentgym.trainer.episodes import Rollouts
    from agentgym.trainer.learner import Learner

    base = [*SMALL, f"log.run_dir={tmp_path}", "log.eval_episodes=256"]
    cfg = load_config("cpu-quickstart", base)
    s = Rollouts(cfg, Learner(cfg))
    dev = held_out(load_config("cpu-quickstart", [*base, "log.eval_seed_start=0"]), s.make_env)
    final = held_out(load_config("cpu-quickstart", [*base, "log.eval_seed_start=1000000"]), s.make_env)
    assert len(set(final.eval_ids())) == 256 and final.eval_seeds()[0] >= 1_000_000
    assert not set(dev.eval_ids()) & set(final.eval_ids()) and final.skipped_tuning and not dev.skipped_tuning
    s.close()
