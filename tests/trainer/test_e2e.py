"""End to end: PPO's own gain on a multi-turn tool environment, from a fixed imperfect warm start.

The environment is MathCalc-v0 (call the ``calculator`` tool, read its result, answer in the
final channel) restricted to a handful of fixed problems, so that a tiny GPT-OSS learns the
tool loop in a CI-sized warm start. The warm start imitates an *imperfect teacher* (the
``guesser``): on most demonstrations it skips the calculator and answers a guess that is
always one digit off. The warm-started policy therefore mostly guesses (greedy success near
0) although it has seen how to use the tool; only PPO, with the sparse outcome reward, can
move it to the tool. The test asserts that gain on fixed evaluation tasks, measured by the
trainer's own evaluations (``warm_start`` right after SFT vs the last ``ppo`` one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from agentgym.environments.math.calc import MathCalcEnv
from agentgym.environments.math.generators import Problem, generate
from agentgym.trainer import sft
from agentgym.trainer.config import load_config
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.train import Trainer

ENV_ID = "agentgym-tests/FewCalc-v0"
N_PROBLEMS = 8


class FewCalcEnv(MathCalcEnv):
    """MathCalc-v0 whose tasks are drawn from ``N_PROBLEMS`` fixed easy arithmetic problems."""

    def pick(self, rng: np.random.Generator, options: dict[str, Any]) -> Problem:
        i = int(rng.integers(N_PROBLEMS))
        return generate("arithmetic", "easy", np.random.default_rng([i, 2024]))


@pytest.fixture
def few_calc(monkeypatch: pytest.MonkeyPatch) -> str:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=FewCalcEnv)
    monkeypatch.setitem(sft.ORACLES, ENV_ID, sft.ORACLES["agentgym/MathCalc-v0"])
    return ENV_ID


RECIPE = [  # the imperfect warm start and PPO (sparse outcome reward, KL to the warm start)
    "seed=0", "threads=1", "env.reward_mode=sparse", "env.max_turns=2", "env.max_action_tokens=80",
    "env.prompt=compact", "env.train_options={}", "env.eval_options={}",
    "sft.steps=120", "sft.batch_size=16", "sft.lr=3e-3", "sft.schedule=constant", "sft.warmup_steps=5",
    "sft.teacher=guesser", "sft.skip_tool=0.7", "sft.guess_right=0",
    "ppo.steps=12", "ppo.lr=1e-3", "ppo.warmup_steps=1", "ppo.kl_coef=0.05",
    "rollout.tasks_per_step=4", "rollout.samples_per_task=8", "rollout.temperature=1.0",
    "log.eval_every=6", "log.eval_episodes=16", "log.checkpoint_every=0", "log.progress=false",
    "log.tensorboard=false",
]


def test_ppo_gain_over_an_imperfect_warm_start(tmp_path: Path, few_calc: str) -> None:
    cfg = load_config("cpu-quickstart", [*RECIPE, f"env.id={few_calc}", f"log.run_dir={tmp_path}"])
    Trainer(cfg).run()
    evals = {(r["stage"], r["step"]): r for r in read_metrics(tmp_path, "eval")}
    warm, final = evals[("warm_start", 0)], evals[("ppo", cfg.ppo.steps)]
    # the warm start knows the format and has seen the tool, but mostly guesses
    assert warm["errors_mean"] < 0.2 and warm["tool_calls_mean"] < 0.5, warm
    # PPO's own gain, greedy on the same fixed tasks
    assert final["success"] >= warm["success"] + 0.5, (warm["success"], final["success"])
    assert final["tool_calls_mean"] > 0.9
    train = read_metrics(tmp_path, "train")
    # every PPO step was exactly on-policy and the engine matched the trainer
    assert all(r["ratio_max_first"] == 1.0 and r["clip_frac_first"] == 0.0 for r in train)
    assert max(r["mismatch_abs_dlogp_max"] for r in train) < 1e-3
    assert (tmp_path / "plots" / "reward.png").exists()
