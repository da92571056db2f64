"""The PPO loop on the tiny MoE model: old log-probs from the learner, the engine's checked
against them (and an engine off by 0.5 nats caught), an engine with its own weights synced every
k steps, clipping acting, placebo / dynamic sampling / overlong masking, NaN caught early."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym.env import DEFAULT_SHAPING
from agentgym.errors import NonFiniteError
from agentgym.trainer.algo.optim import check_finite
from agentgym.trainer.cli import main
from agentgym.trainer.config import load_config
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.model.files import latest_checkpoint
from agentgym.trainer.train import Trainer

SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
         "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=2",
         "log.eval_episodes_final=0", "controls=[]", "sft.min_wellformed=0",
         "ppo.baseline_scale=1", "ppo.group_std_normalize=true"]  # GRPO's advantages, not the recipe's


def test_engine_log_probs_agree_with_the_learners_for_tiny_moe(tmp_path: Path) -> None:
    """The behaviour log-probs the engine recorded are the learner's own numbers for the
    sampled tokens (float noise apart): the stored trajectory is what the loss is computed on."""
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                                         "correction.mode=none"])
    trainer = Trainer(cfg)
    assert trainer.learner.model.config.num_local_experts > 1  # the MoE path is the one tested
    m = trainer.train_step(0)
    assert m["mismatch_n_tokens"] > 0 and m["mismatch_abs_dlogp_max"] < 1e-3
    trainer.close()


class ShiftedEngine:
    """An engine whose reported log-probs are ``shift`` nats too low (same samples)."""

    def __init__(self, inner: object, shift: float) -> None:
        self.inner, self.shift = inner, shift

    def generate(self, prompts: list[list[int]], **kw: object) -> list[object]:
        out = self.inner.generate(prompts, **kw)  # type: ignore[attr-defined]
        for sample in out:
            sample.logprobs = [x - self.shift for x in sample.logprobs]
        return out  # type: ignore[no-any-return]


def test_old_log_probs_come_from_the_learner_and_a_wrong_engine_is_caught(tmp_path: Path) -> None:
    """An engine whose log-probs are 0.5 nats too low: the PPO ratio still starts at the learner's
    own log-probs (no clipping in the first minibatch), the mismatch statistics see the 0.5
    nats, every seq_tis weight saturates at the cap, and the health monitor names both."""
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                                         "correction.mode=seq_tis", "correction.threshold=2.0"])
    t = Trainer(cfg)
    t.rollouts.collector.engine = ShiftedEngine(t.rollouts.collector.engine, 0.5)
    m = t.train_step(0)
    assert m["mismatch_abs_dlogp_mean"] == pytest.approx(0.5, abs=1e-3)
    assert m["mismatch_k3"] == pytest.approx(math.exp(0.5) - 1.5, rel=1e-2)
    assert m["clip_frac_first"] == 0.0 and m["ratio_max_first"] < 1.0 + 1e-5  # old = learner, not engine
    assert m["mismatch_w_min"] == pytest.approx(2.0) and m["mismatch_capped_frac"] == 1.0
    alerts = t.health.check(1, m)
    assert any(a.startswith("engine/learner mismatch: k3 0.149 > 0.05, mean |dlogp| 0.5 > 0.2") for a in alerts)
    assert any(a.startswith("correction weights capped or masked on 1 > 0.2") for a in alerts)
    t.close()
    healthy = Trainer(load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / 'ok'}", "ppo.steps=1"]))
    m = healthy.train_step(0)
    assert healthy.health.check(1, m) == []  # the same step with the real engine raises nothing
    healthy.close()


def test_several_epochs_use_a_separate_old_pass(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                                         "ppo.epochs=2", "ppo.minibatches=2",
                                         "env.kwargs={families: [arithmetic]}"])
    assert cfg.derived()["exact_on_policy"] is False
    m = Trainer(cfg).train_step(0)
    assert m["ratio_min_first"] == pytest.approx(1.0, abs=1e-5)  # old pass == first minibatch
    assert m["ratio_max_first"] == pytest.approx(1.0, abs=1e-5)


def test_nan_reward_raises_before_any_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # shaped reward with a NaN weight: every turn's reward is NaN (the config refuses a NaN in
    # env.kwargs, so the env's default weight is the one made NaN, as an env's bug would)
    monkeypatch.setitem(DEFAULT_SHAPING, "turn", math.nan)
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=2",
                                         "log.checkpoint_every=1", "env.reward_mode=shaped"])
    with pytest.raises(NonFiniteError, match="reward") as e:
        Trainer(cfg).run()
    assert "expected a finite number" in str(e.value)
    assert latest_checkpoint(tmp_path) is None
    assert not list(tmp_path.glob("checkpoints/step-*"))
    assert read_metrics(tmp_path, "train") == []


def test_cli_reports_non_finite_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DEFAULT_SHAPING, "turn", math.inf)
    code = main(["--config", "cpu-quickstart", *SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1",
                 "env.reward_mode=shaped"])
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
    cell = r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\]"  # success [95% interval]
    assert re.search(rf"held-out success, greedy \(secondary; 2 problems\): untrained {cell} -> warm start "
                     rf"{cell} -> after REINFORCE {cell}; gain over the warm start [+-]\d\.\d{{3}} ± \d\.\d{{3}} "
                     "paired", out), out
    # one epoch, one minibatch, the engine on the learner's weights: the ratio is exactly 1, and the
    # closing lines name the update for what it computed
    assert re.search(r"update \(2 steps; not PPO: the ratio stayed exactly 1.*ratio range \[1\.0000, 1\.0000\], "
                     r"clipped 0\.00% of tokens, negative advantage on \d+\.\d% of tokens", out), out
    assert (tmp_path / "plots" / "reward.png").exists()


ONE_TASK = ["env.kwargs={families: [arithmetic]}", "ppo.lr=1e-2", "log.checkpoint_every=1",
            "ppo.entropy_coef=0.01"]  # an entropy bonus: the policy moves even when all rewards tie


def _ppo(t: Trainer, trajs: list[Any], groups: list[int], step: int) -> dict[str, Any]:
    """The PPO part of ``t.train_step`` on given episodes: batch -> score -> advantages -> update."""
    from agentgym.trainer.update import compute_advantages, ppo_update, score

    m: dict[str, Any] = {}
    batch = t.rollouts.batch(trajs, groups, m)
    if batch is not None:
        batch = score(batch, t.cfg, step, t.ranks, t.reward_norm)
        m.update(compute_advantages(t.learner, batch, t.cfg, step), **ppo_update(t.learner, batch, t.cfg, step))
    return m


def _params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def test_an_engine_copy_is_off_the_learner_and_synced_every_k_steps(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path}", "ppo.steps=3",
                                         "rollout.engine_weights=copy", "rollout.sync_every=2",
                                         "correction.mode=token_tis"])
    t = Trainer(cfg)
    engine_model = t.rollouts.engine.model
    assert engine_model is not t.learner.model
    m0 = t.train_step(0)  # the engine holds the learner's weights: float noise only
    assert m0["engine_staleness"] == 0 and m0["mismatch_abs_dlogp_max"] < 1e-4
    assert not torch.equal(_params(engine_model), _params(t.learner.model))  # not synced after step 1 of 2
    m1 = t.train_step(1)  # sampled by the policy one update old
    assert m1["engine_staleness"] == 1 and m1["mismatch_abs_dlogp_mean"] > 1e-3
    assert m1["mismatch_w_std"] > 0  # token_tis weights act
    torch.testing.assert_close(_params(engine_model), _params(t.learner.model))  # synced after step 2
    t.step = 2
    assert t.train_step(2)["engine_staleness"] == 0
    trajs, _, _ = t.rollouts.collect(3)
    assert {x.policy_version for x in trajs} == {2}
    t.close()


def test_a_bfloat16_engine_copy_mismatches_the_float32_learner(tmp_path: Path) -> None:
    out = {}
    for dtype in ("float32", "bfloat16"):
        cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / dtype}", "ppo.steps=1",
                                             "rollout.engine_weights=copy", f"rollout.engine_dtype={dtype}"])
        t = Trainer(cfg)
        assert next(t.rollouts.engine.model.parameters()).dtype == getattr(torch, dtype)
        out[dtype] = t.train_step(0)
        t.close()
    assert out["float32"]["mismatch_abs_dlogp_mean"] < 1e-5
    assert out["bfloat16"]["mismatch_abs_dlogp_mean"] > 100 * out["float32"]["mismatch_abs_dlogp_mean"]


def test_clipping_acts_with_two_epochs_and_two_minibatches(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path}", "ppo.epochs=2",
                                         "ppo.minibatches=2", "ppo.lr=5e-2", "rollout.samples_per_task=4"])
    m = Trainer(cfg).train_step(0)
    assert m["clip_frac"] > 0 and (m["ratio_max"] > 1.28 or m["ratio_min"] < 0.8)


@pytest.mark.parametrize("algo", ["ppo", "sft"])
def test_a_cosine_schedule_decays_the_lr_to_a_tenth_at_the_last_step(tmp_path: Path, algo: str) -> None:
    """ppo.schedule=cosine over 4 steps (warmup 1): after each step the lr is 1, 0.775, 0.325,
    then 0.1 of the peak; the imitation arms' update (here SFT's) takes the same schedule."""
    cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path}", f"algo={algo}",
                                         "ppo.steps=4", "ppo.warmup_steps=1", "ppo.lr=1e-3",
                                         "ppo.schedule=cosine", "rollout.samples_per_task=4"])
    t = Trainer(cfg)
    lrs = []
    for step in range(4):
        t.train_step(step)
        lrs.append(t.learner.optimizer.param_groups[0]["lr"])
    t.close()
    assert lrs == pytest.approx([1e-3, 7.75e-4, 3.25e-4, 1e-4])


def test_placebo_permutes_the_scores_of_the_batch(tmp_path: Path) -> None:
    from agentgym.trainer.algo.ppo import on_last_policy_token, placebo_permutation

    p = placebo_permutation(16, 0, 3)
    assert sorted(p.tolist()) == list(range(16)) and torch.equal(p, placebo_permutation(16, 0, 3))
    assert not torch.equal(p, placebo_permutation(16, 0, 4))
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0]])
    torch.testing.assert_close(on_last_policy_token(torch.tensor([2.0, 3.0]), mask),
                               torch.tensor([[0, 0, 0, 0, 2.0, 0], [0, 0, 0, 3.0, 0, 0]]))
    stats = {}
    for placebo in (False, True):
        cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / str(placebo)}",
                                             f"ppo.placebo={str(placebo).lower()}", "rollout.samples_per_task=4"])
        t = Trainer(cfg)
        trajs, groups, _ = t.rollouts.collect(0)
        for i, tr in enumerate(trajs):  # rewards that differ within the groups
            tr.traj.turns[-1].reward = float(i % 3 == 0)
        stats[placebo] = _ppo(t, trajs, groups, 0)
        t.close()
    assert stats[True]["pg_loss"] != stats[False]["pg_loss"]  # other episodes' returns, same samples


def _first_step_advantages(tmp_path: Path,
                           overrides: list[str]) -> tuple[Any, torch.Tensor, list[int], torch.Tensor]:
    """Step 0's episodes scored so that task 0's two samples both succeed and task 1's one of two,
    through ``score`` and ``compute_advantages`` -> (config, the scores, the group ids, each
    episode's advantage)."""
    cfg, t, b, groups = _first_step_batch(tmp_path, overrides)
    t.close()
    s = torch.tensor([float(i != 3) for i in range(len(groups))])
    got = torch.stack([row[m.bool()][0] for row, m in zip(b.advantages, b.policy_mask, strict=True)])
    return cfg, s, groups, got


def _first_step_batch(tmp_path: Path, overrides: list[str]) -> tuple[Any, Trainer, Any, list[int]]:
    """Step 0's batch, every episode but the fourth scored 1, with its advantages -> (config, the
    trainer, left open, the batch, the group ids)."""
    from agentgym.trainer.update import compute_advantages, score

    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", *overrides])
    t = Trainer(cfg)
    trajs, groups, _ = t.rollouts.collect(0)
    for i, tr in enumerate(trajs):
        tr.traj.turns[-1].reward = float(i != 3)
    b = score(t.rollouts.batch(trajs, groups, {}), cfg, 0, t.ranks)
    compute_advantages(t.learner, b, cfg, 0)
    return cfg, t, b, list(groups)


@pytest.mark.parametrize("std", [True, False])
def test_batch_advantage_has_one_baseline_for_the_whole_step(tmp_path: Path, std: bool) -> None:
    """``ppo.advantage=batch``: (score - mean of all the step's scores) [/ their std]; a task whose
    samples all succeeded still gets a positive advantage (under the group baseline: zero)."""
    _, s, _, got = _first_step_advantages(tmp_path, ["ppo.advantage=batch",
                                                     f"ppo.group_std_normalize={str(std).lower()}"])
    want = (s - s.mean()) / (s.std() + 1e-6) if std else s - s.mean()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert float(got[0]) > 0 and float(got[1]) > 0  # the all-solved task is reinforced


def test_prefix_advantage_reaches_the_update(tmp_path: Path) -> None:
    """``ppo.advantage=prefix`` on a real step: each policy token's advantage is the token tree's
    (``prefix_advantages`` of the episodes' own tokens), 0 off the policy tokens, 0 on the first
    action's tokens that every sample of its task took, and the update runs on it."""
    from agentgym.trainer.algo.ppo import prefix_advantages
    from agentgym.trainer.update import ppo_update

    cfg, t, b, groups = _first_step_batch(tmp_path, ["ppo.advantage=prefix"])
    rows = [b.input_ids[i, :n].tolist() for i, n in enumerate(b.lengths.tolist())]
    want = prefix_advantages(rows, b.scores, b.group_ids)
    w = want.shape[1]
    torch.testing.assert_close(b.advantages[:, :w], want * b.policy_mask[:, :w])
    assert b.advantages[b.policy_mask == 0].abs().sum() == 0
    first = int(b.policy_mask[0].nonzero()[0])  # every sample's first sampled token, after the shared prompt
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        if len({int(b.input_ids[i, first]) for i in idx}) == 1:  # all took it: no credit either way
            assert all(float(b.advantages[i, first]) == 0 for i in idx)
    m = ppo_update(t.learner, b, cfg, 0)
    assert math.isfinite(m["loss"])
    t.close()


@pytest.mark.parametrize("placebo", [False, True])
def test_a_partial_baseline_reaches_the_update(tmp_path: Path, placebo: bool) -> None:
    """``ppo.baseline_scale=0.5``: each episode's advantage is its score less half its group's
    mean (the placebo's: of the permuted scores), so a task every sample solved is reinforced."""
    from agentgym.trainer.algo.ppo import placebo_permutation

    cfg, s, groups, got = _first_step_advantages(tmp_path, ["ppo.group_std_normalize=false",
                                                            "ppo.baseline_scale=0.5",
                                                            f"ppo.placebo={str(placebo).lower()}"])
    if placebo:
        s = s[placebo_permutation(len(s), cfg.seed, 0)]
    g = torch.tensor(groups)
    mean = torch.stack([s[g == k].mean() for k in g])
    torch.testing.assert_close(got, s - 0.5 * mean)
    assert (got > 0).sum() == (s > 0).sum()  # every success pushed up, whatever its group


def test_dynamic_sampling_drops_uniform_groups_and_overlong_actions_are_masked(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / 'ds'}", "ppo.drop_uniform_groups=true"])
    t = Trainer(cfg)
    before = _params(t.learner.model)
    m = t.train_step(0)  # the untrained policy fails every task: every group is uniform
    assert m["groups_dropped_frac"] == 1.0 and m["update_skipped"] == 1.0
    assert torch.equal(before, _params(t.learner.model))
    trajs, groups, _ = t.rollouts.collect(1)
    for i, tr in enumerate(trajs):
        tr.traj.turns[-1].reward = float(i == 0)  # group 0 informative, group 1 uniform
    assert _ppo(t, trajs, groups, 1)["groups_dropped_frac"] == 0.5
    t.close()
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path / 'ol'}", "ppo.mask_overlong=true",
                                         "ppo.entropy_coef=0.01"])
    t = Trainer(cfg)
    m = t.train_step(0)  # 16-token actions from an untrained policy: every one is cut at the limit
    assert m["overlong_frac"] == 1.0 and m["mismatch_n_tokens"] == 0.0 and m["grad_norm"] == 0.0
    t.close()


def test_kl_reference_is_the_initial_policy_without_warm_start_and_after_resume(tmp_path: Path) -> None:
    """The KL anchor is the initial policy and survives a resume; so does the adaptive KL
    coefficient (``ppo.kl_target``: doubled after a step above 1.5 x target, never under its start)."""
    args = [*SMALL, *ONE_TASK, "ppo.kl_coef=0.1", "ppo.kl_target=1e-5"]  # SMALL: sft.steps=0, no warm start
    full = Trainer(load_config("cpu-quickstart", [*args, f"log.run_dir={tmp_path / 'full'}", "ppo.steps=3"]))
    initial = {k: v.clone() for k, v in full.learner.model.state_dict().items()}
    full.run()
    rows = read_metrics(tmp_path / "full", "train")
    assert all("kl_ref" in r for r in rows), "no KL term although ppo.kl_coef > 0"
    assert abs(rows[0]["kl_ref"]) < 1e-6 and rows[-1]["kl_ref"] > 1e-4  # anchored at the start
    assert rows[1]["kl_ref"] > 1.5e-5, rows[1]
    assert [r["kl_coef"] for r in rows] == [0.1, 0.1, 0.2]  # KL ~0 at step 1 keeps the floor
    Trainer(load_config("cpu-quickstart", [*args, f"log.run_dir={tmp_path / 'part'}", "ppo.steps=2"])).run()
    resumed = Trainer(load_config("cpu-quickstart", [*args, f"log.run_dir={tmp_path / 'part'}",
                                                     "ppo.steps=3"]), resume=True)
    assert resumed.learner.ref_model is not None
    ref = resumed.learner.ref_model.state_dict()
    assert all(torch.equal(ref[k], initial[k]) for k in initial), "the anchor moved on resume"
    assert not all(torch.equal(resumed.learner.model.state_dict()[k], initial[k]) for k in initial)
    resumed.run()
    strip = ("t_", "gen_s", "env_s")
    a = [{k: v for k, v in r.items() if not k.startswith(strip)} for r in read_metrics(tmp_path / "full")]
    b = [{k: v for k, v in r.items() if not k.startswith(strip)} for r in read_metrics(tmp_path / "part")]
    assert a == b


def test_init_from_a_checkpoint_of_another_model_names_the_keys(tmp_path: Path) -> None:
    from agentgym.errors import CheckpointError
    from agentgym.trainer.model.files import save_model
    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    save_model(build_tiny_gptoss(264, seed=0, num_hidden_layers=2), tmp_path / "two")
    save_model(build_tiny_gptoss(264, seed=0, num_hidden_layers=6), tmp_path / "six")
    base = [*SMALL, f"log.run_dir={tmp_path / 'run'}"]
    with pytest.raises(CheckpointError, match=r"missing.*model\.layers\.2\."):
        Trainer(load_config("cpu-quickstart", [*base, f"model.init_from={tmp_path / 'two'}"]))
    with pytest.raises(CheckpointError, match=r"unexpected.*model\.layers\.4\."):
        Trainer(load_config("cpu-quickstart", [*base, f"model.init_from={tmp_path / 'six'}"]))


def test_kl_in_reward_is_the_k1_penalty(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path / 'k1'}",
                                         "ppo.kl_coef=0.5", "ppo.kl_in=reward", "ppo.kl_estimator=k1"])
    t = Trainer(cfg)
    t.train_step(0)  # moves the policy away from its reference
    out = t.train_step(1)
    t.close()
    # kl_ref (what the health monitor reads) is k3 whatever the penalty; the reward's k1 is another
    # number (it can be negative on a batch), and it changes the loss
    assert out["kl_ref"] >= 0 and out["kl_reward"] != pytest.approx(out["kl_ref"], rel=1e-3)
    assert out["kl_reward"] != 0


def _grads_at_step(t: Trainer) -> list[list[torch.Tensor | None]]:
    """The gradients each optimizer step of ``t`` uses (the trainer frees them before the sync)."""
    seen: list[list[torch.Tensor | None]] = []
    t.learner.optimizer.register_step_pre_hook(lambda _opt, _a, _k: seen.append(
        [None if p.grad is None else p.grad.detach().clone() for p in t.learner.params]))
    return seen


def test_carried_warm_start_optimizer_is_measured(tmp_path: Path) -> None:
    """A fresh AdamW's first step is g / (|g| + eps) per weight (sign g, in units of lr);
    carried warm-start moments change it. ``adam_step_rms`` reports it every step, and it
    agrees with the parameter change actually applied."""
    steps = {}
    for carry in (False, True):
        cfg = load_config("cpu-quickstart", [
            *[a for a in SMALL if not a.startswith("sft.steps")], *ONE_TASK, "sft.steps=3",
            "sft.batch_size=4", "ppo.warmup_steps=1", f"ppo.carry_sft_optimizer={str(carry).lower()}",
            f"log.run_dir={tmp_path / str(carry)}", "ppo.steps=1"])
        t = Trainer(cfg)
        from agentgym.trainer.sft import run_sft

        run_sft(cfg, t.learner, t.rollouts, t.log)
        before = [p.detach().clone() for p in t.learner.params]
        seen = _grads_at_step(t)
        m = t.train_step(0)
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(t.learner.params, before)]) / cfg.ppo.lr
        grads = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                           for p, g in zip(t.learner.params, seen[-1])])
        hit = grads != 0
        measured = float(moved[hit].pow(2).mean().sqrt())
        assert m["adam_step_rms"] == pytest.approx(measured, rel=1e-3)
        if not carry:  # fresh: m_hat = g, v_hat = g^2
            sign = grads[hit] / (grads[hit].abs() + 1e-8)
            assert m["adam_step_rms"] == pytest.approx(float(sign.pow(2).mean().sqrt()), rel=1e-4)
        steps[carry] = m["adam_step_rms"]
        t.close()
    assert abs(steps[True] - steps[False]) > 0.05, steps  # carrying changes the first step measurably


def test_a_real_update_has_ratio_one_and_no_clipping_from_the_trainers_loss_path(tmp_path: Path) -> None:
    """Two epochs: the old log-probs come from a separate no-grad pass, and the ratio of the
    first epoch's loss is still exactly 1 (same micro-batches, deterministic kernels); the
    second epoch's is not (the first epoch changed the weights)."""
    cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path}", "ppo.epochs=2",
                                         "ppo.entropy_coef=0.01", "correction.mode=none"])
    t = Trainer(cfg)
    before = [p.detach().clone() for p in t.learner.model.parameters()]
    m = t.train_step(0)
    assert m["ratio_min_first"] == 1.0 and m["ratio_max_first"] == 1.0 and m["clip_frac_first"] == 0.0
    assert m["ratio_max"] > 1.0 or m["ratio_min"] < 1.0  # epoch 2 saw the updated weights
    assert any(not torch.equal(p, b) for p, b in zip(t.learner.model.parameters(), before))
    t.close()


@pytest.mark.parametrize("advantage", ["group", "gae"])
def test_micro_batched_update_equals_the_single_batch_update(tmp_path: Path, advantage: str) -> None:
    """Same step with the whole batch in one forward/backward and cut into micro-batches of
    at most 400 padded tokens: same losses and the same accumulated gradient."""
    grads, stats = {}, {}
    for budget in (0, 400):
        cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path / str(budget)}",
                                             f"ppo.advantage={advantage}", f"ppo.micro_batch_tokens={budget}",
                                             "ppo.kl_coef=0.1", "rollout.samples_per_task=3"])
        t = Trainer(cfg)
        seen = _grads_at_step(t)
        stats[budget] = t.train_step(0)
        assert all(p.grad is None for p in t.learner.params)  # freed before the engine sync
        grads[budget] = torch.cat([g.flatten() for g in seen[-1]])
        t.close()
    assert stats[400]["reward_mean"] == stats[0]["reward_mean"]  # same episodes
    for key in ("loss", "pg_loss", "entropy", "kl_ref", "grad_norm", "mismatch_k3"):
        assert stats[400][key] == pytest.approx(stats[0][key], rel=1e-5, abs=1e-7), key
    if advantage == "gae":
        assert stats[400]["value_loss"] == pytest.approx(stats[0]["value_loss"], rel=1e-5)
    torch.testing.assert_close(grads[400], grads[0], rtol=1e-4, atol=1e-7)


def test_bf16_compute_update_tracks_the_fp32_update(tmp_path: Path) -> None:
    """model.dtype=bfloat16 keeps float32 master weights and AdamW state and computes in bf16:
    on the same episodes its update follows the float32 run's, and at the 20B recipe's lr of
    1e-6 it moves the weights, which bf16 parameters would mostly not (round-off)."""
    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.rollout.collector import group_seeds
    from agentgym.trainer.update import compute_advantages, ppo_update, score

    runs = {}
    batch = None
    for dtype in ("float32", "bfloat16"):
        cfg = load_config("cpu-quickstart", [*SMALL, *ONE_TASK, f"log.run_dir={tmp_path / dtype}",
                                             f"model.dtype={dtype}", "ppo.lr=1e-6", "ppo.kl_coef=0.1",
                                             "ppo.warmup_steps=1", "rollout.samples_per_task=4"])
        t = Trainer(cfg)
        assert all(p.dtype == torch.float32 for p in t.learner.params)  # master weights
        if batch is None:
            seeds, groups = group_seeds(1_000_000, 2, 4)
            trajs, _ = t.rollouts.collector.collect(seeds, temperature=1.0, sample_seed=3, options={})
            for i, tr in enumerate(trajs):
                tr.traj.turns[-1].reward += 0.1 * i
            batch = make_batch(trajs, groups, pad_id=t.learner.pad_id)
        before = torch.cat([p.detach().flatten() for p in t.learner.params])
        scored = score(batch, cfg, 0, t.learner.ranks)
        compute_advantages(t.learner, scored, cfg, 0)
        m = ppo_update(t.learner, scored, cfg, 0)
        after = torch.cat([p.detach().flatten() for p in t.learner.params])
        assert all(st["exp_avg"].dtype == torch.float32 for st in t.learner.optimizer.state.values())
        runs[dtype] = (m, after - before, torch.cat([p.grad.flatten() for p in t.learner.params]), t)
    (m32, d32, g32, _), (m16, d16, g16, t16) = runs["float32"], runs["bfloat16"]
    cos = torch.nn.functional.cosine_similarity
    assert float(cos(g16, g32, dim=0)) > 0.99  # same gradient up to bf16 rounding
    assert float(cos(d16, d32, dim=0)) > 0.9  # and the same step (Adam ~ lr * sign(g))
    assert m16["entropy"] == pytest.approx(m32["entropy"], rel=1e-2)
    assert m16["mismatch_abs_dlogp_mean"] < 0.05  # bf16 trainer vs the fp32-sampled episodes
    moved16 = float((d16 != 0).float().mean())
    assert moved16 > 0.5  # the float32 master copy takes the 1e-6 steps
    # the same step applied to bf16 parameters is mostly rounded away
    params = torch.cat([p.detach().flatten() for p in t16.learner.params]) - d16
    lost = float(((params.bfloat16() + d16.bfloat16()).float() == params.bfloat16().float())[d16 != 0]
                 .float().mean())
    assert lost > 0.8
    for _, _, _, t in runs.values():
        t.close()


def test_read_metrics_counts_whole_lines_only(tmp_path: Path) -> None:
    """A run that is writing (or was killed while writing) can leave a last record without its
    newline: a reader of the live file sees the records written so far, not a JSON error."""
    (tmp_path / "metrics.jsonl").write_text('{"phase": "sft", "step": 1}\n{"phase": "sft", "step": 2, "loss": 1')
    assert read_metrics(tmp_path) == [{"phase": "sft", "step": 1}]
    (tmp_path / "metrics.jsonl").write_text('{"phase": "sft", "step": 1}\n{"phase": "ppo", "step": 2}\n')
    assert [r["step"] for r in read_metrics(tmp_path, "ppo")] == [2]
    (tmp_path / "metrics.jsonl").write_text('{"phase": "sft", "st')
    assert read_metrics(tmp_path) == []
