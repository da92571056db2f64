"""The PPO loop: exactly on-policy first update on the tiny MoE model; NaN caught early."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from agentgym.errors import NonFiniteError
from agentgym.trainer.checkpoint import latest_checkpoint
from agentgym.trainer.cli import main
from agentgym.trainer.config import load_config
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.train import Trainer, check_finite

SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
         "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=2"]


def test_first_update_is_exactly_on_policy_for_tiny_moe(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                                         "correction.mode=none"])
    trainer = Trainer(cfg)
    assert trainer.s.model.config.num_local_experts > 1  # the MoE path is the one tested
    m = trainer.train_step(0)
    # old log-probs are the detached log-probs of the same forward pass: ratio == 1 exactly
    assert m["ratio_min_first"] == 1.0 and m["ratio_max_first"] == 1.0
    assert m["clip_frac_first"] == 0.0 and m["approx_kl"] == 0.0
    # the engine sampled from the same weights: mismatch is float noise only
    assert m["mismatch_abs_dlogp_max"] < 1e-3
    trainer.s.close()


def test_several_epochs_use_a_separate_old_pass(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                                         "ppo.epochs=2", "ppo.minibatches=2",
                                         "env.kwargs={families: [arithmetic]}"])
    assert cfg.derived()["exact_on_policy"] is False
    m = Trainer(cfg).train_step(0)
    assert m["ratio_min_first"] == pytest.approx(1.0, abs=1e-5)  # old pass == first minibatch
    assert m["ratio_max_first"] == pytest.approx(1.0, abs=1e-5)


def test_nan_reward_raises_before_any_checkpoint(tmp_path: Path) -> None:
    # shaped reward with a NaN weight: every turn's reward is NaN
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=2",
                                         "log.checkpoint_every=1", "env.reward_mode=shaped",
                                         "env.kwargs={shaping: {turn: .nan}}"])
    with pytest.raises(NonFiniteError, match="reward") as e:
        Trainer(cfg).run()
    assert "expected a finite number" in str(e.value)
    assert latest_checkpoint(tmp_path) is None
    assert not list(tmp_path.glob("checkpoints/step-*"))
    assert read_metrics(tmp_path, "train") == []


def test_cli_reports_non_finite_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--config", "cpu-quickstart", *SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                 "env.reward_mode=shaped", "env.kwargs={shaping: {turn: .inf}}"])
    err = capsys.readouterr().err
    assert code == 1 and "NonFiniteError" in err and "Traceback" not in err


def test_check_finite_names_the_tensor() -> None:
    check_finite("loss", torch.tensor(1.0), 3, "hint")
    with pytest.raises(NonFiniteError, match=r"step 3: 1 non-finite value\(s\) in loss.*No checkpoint"):
        check_finite("loss", torch.tensor([1.0, float("nan")]), 3, "hint")


def test_evaluations_bracket_the_run_and_the_cli_prints_them(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    small = [a for a in SMALL if not a.startswith(("log.eval_every", "sft.steps"))]
    code = main(["--config", "cpu-quickstart", *small, f"log.run_dir={tmp_path}", "ppo.steps=2",
                 "log.eval_every=1", "sft.steps=1", "sft.batch_size=2", "log.plots=true",
                 "log.eval_episodes_final=0", "log.eval_sampled=false"])
    assert code == 0
    stages = [(r["step"], r["stage"]) for r in read_metrics(tmp_path, "eval")]
    assert stages == [(0, "init"), (0, "warm_start"), (1, "ppo"), (2, "ppo")]
    out = capsys.readouterr().out
    cell = r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\] \(n=2\)"  # success [95% interval] (tasks)
    assert re.search(rf"eval success, greedy: untrained {cell} -> warm start {cell} -> after PPO {cell}; "
                     r"PPO's own gain [+-]\d\.\d{3} ± \d\.\d{3}", out), out
    assert (tmp_path / "plots" / "reward.png").exists()
