"""Checkpoints: atomic, complete, and a resumed run reproduces an uninterrupted one exactly.

kill -9 of a real run and ``--resume`` through the CLI, compared with a run never killed: test_resume.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.trainer.config import load_config
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.model.files import latest_checkpoint
from agentgym.trainer.train import Trainer

BASE = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
        "log.eval_every=0", "sft.steps=2", "sft.batch_size=4", "env.max_turns=2",
        "env.max_action_tokens=16", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "log.checkpoint_every=1", "ppo.lr=1e-2", "env.kwargs={families: [arithmetic]}",
        "sft.min_wellformed=0", "log.eval_episodes=2", "log.eval_episodes_final=0", "controls=[]"]
VOLATILE = ("t_", "gen_s", "env_s")  # wall-clock timings differ run to run


def _stable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


@pytest.mark.slow
def test_resume_from_a_fresh_object_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    full, part = tmp_path / "full", tmp_path / "part"
    Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={full}", "ppo.steps=3"])).run()
    Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={part}", "ppo.steps=2"])).run()
    ckpt = latest_checkpoint(part)
    assert ckpt is not None and ckpt.name == "step-000002"
    for f in ("model/model.safetensors", "model/config.json", "optimizer.pt", "scheduler.pt",
              "rng.pt", "state.json"):
        assert (ckpt / f).exists(), f
    resumed = Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={part}", "ppo.steps=3"]),
                      resume=True)
    assert resumed.step == 2 and resumed.sft_done
    resumed.run()
    a, b = _stable(read_metrics(full)), _stable(read_metrics(part))
    assert [r["phase"] for r in a] == [r["phase"] for r in b]
    assert a == b  # bit-for-bit on CPU: every loss, grad norm, reward and mismatch statistic
    assert len(read_metrics(full, "train")) == 3


def test_resume_applies_a_changed_learning_rate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={run}", "ppo.steps=2",
                                           "ppo.warmup_steps=4"])).run()
    resumed = Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={run}", "ppo.steps=3",
                                                     "ppo.warmup_steps=4", "ppo.lr=3e-3"]), resume=True)
    opt = resumed.learner.optimizer
    # 2 optimizer steps into a 4-step warmup: 3/4 of the new peak, not of the saved one (1e-2)
    assert [g["lr"] for g in opt.param_groups] == [3e-3 * 3 / 4] * len(opt.param_groups)
    resumed.run()
    assert read_metrics(run, "train")[-1]["lr"] == 3e-3
