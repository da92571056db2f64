"""The live health monitor: each failure mode is named with its value, bound and step; a
healthy run raises nothing; the trainer shows alerts in the progress output and the metrics."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.config import load_config
from agentgym.trainer.health import HealthConfig, HealthMonitor, health_summary
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.train import Trainer


def feed(mon: HealthMonitor, rows: list[dict[str, float]]) -> list[list[str]]:
    return [mon.check(i + 1, r) for i, r in enumerate(rows)]


def healthy(i: int) -> dict[str, float]:
    return {"kl_ref": 0.01, "entropy": 0.2, "grad_norm": 0.5, "reward_mean": 0.3 + 0.02 * i}


def test_a_healthy_run_raises_nothing() -> None:
    alerts = feed(HealthMonitor(HealthConfig()), [healthy(i) for i in range(30)])
    assert alerts == [[]] * 30


def test_exploding_kl_is_named_with_value_bound_and_step() -> None:
    rows = [healthy(i) for i in range(20)]
    rows[16]["kl_ref"] = 0.2
    alerts = feed(HealthMonitor(HealthConfig(max_kl_ref=0.1)), rows)
    assert alerts[16] == ["KL to reference 0.2 > 0.1 at step 17"]
    assert all(not a for i, a in enumerate(alerts) if i != 16)


def test_exploding_entropy_against_its_own_baseline() -> None:
    mon = HealthMonitor(HealthConfig(window=5, max_entropy_ratio=2.0, min_entropy=0.3))
    rows = [healthy(i) for i in range(10)]
    rows[7]["entropy"] = 0.35  # below 2 x 0.2 = 0.4: no alert
    rows[8]["entropy"] = 0.9
    alerts = feed(mon, rows)
    assert not alerts[7]
    assert len(alerts[8]) == 1 and alerts[8][0].startswith("entropy 0.9 > 0.4") and "step 9" in alerts[8][0]
    # a tiny baseline doubling stays under the absolute floor
    mon = HealthMonitor(HealthConfig(window=2, min_entropy=0.3))
    assert feed(mon, [{"entropy": 0.01}, {"entropy": 0.01}, {"entropy": 0.05}])[-1] == []


def test_rising_grad_norm_uses_the_recent_mean() -> None:
    mon = HealthMonitor(HealthConfig(window=3, max_grad_norm_ratio=3.0, reward_patience=100))
    norms = [0.5, 0.5, 0.5, 0.6, 2.5, 0.6, 0.7, 2.5, 3.0]
    alerts = feed(mon, [{"grad_norm": g} for g in norms])
    assert not any(alerts[:8])  # one spike (2.5) does not move the mean of three past 3 x 0.5
    assert alerts[8] == ["grad norm rising 2.07 (mean of the last 3 steps) > 1.5 (3x its "
                         "first-3-step mean 0.5) at step 9"]


def test_reward_not_increasing_after_patience() -> None:
    cfg = HealthConfig(window=5, reward_patience=10)
    flat = [{"reward_mean": 0.5} for _ in range(12)]  # no spread: flat beyond doubt
    alerts = feed(HealthMonitor(cfg), flat)
    assert not any(alerts[:9])
    assert alerts[9] == ["reward not increasing: mean 0.500 over the last 5 steps against 0.500 over "
                         "the first 5 (+0.000; bound +0) at step 10"]
    rising = [{"reward_mean": 0.1 * i} for i in range(12)]
    assert not any(feed(HealthMonitor(cfg), rising))


def test_a_noisy_reward_is_compared_beyond_its_noise() -> None:
    # the sampled reward of 4 tasks a step (a PPO arm of the quickstart): it swings from 0.03 to
    # 0.69 while the held-out success rises; compared raw, the windows disagree at steps 10-18
    noisy = [0.12, 0.44, 0.50, 0.50, 0.19, 0.50, 0.12, 0.38, 0.56, 0.03,
             0.16, 0.19, 0.31, 0.25, 0.12, 0.66, 0.19, 0.22, 0.69, 0.62]
    rows = [{"reward_mean": r} for r in noisy]
    raw = feed(HealthMonitor(HealthConfig(reward_z=0)), rows)
    assert [i + 1 for i, a in enumerate(raw) if a] == [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert not any(feed(HealthMonitor(HealthConfig()), rows))
    # a reward that falls by more than its noise is named, with its standard error
    falling = [{"reward_mean": r} for r in (0.12, 0.44, 0.50, 0.50, 0.19, 0.06, 0.03, 0.0, 0.03, 0.0)]
    alert = feed(HealthMonitor(HealthConfig()), falling)[-1]
    assert alert[0] == ("reward not increasing: mean 0.024 over the last 5 steps against 0.350 over the "
                        "first 5 (-0.326 ± 0.082, at most -0.080 at 3 SE; bound +0) at step 10")
    assert alert[1].startswith("reward saturated near 0")  # and it fell to nothing to learn from


def test_the_reward_checks_false_alarm_rate_under_a_reward_that_does_not_change() -> None:
    """The default bound's point: over 20 PPO steps of 4 tasks x 8 samples whose success rates do
    not change (drawn per task from Beta(1, 3)), the check fires in about 5% of runs; compared raw,
    in most of them."""
    rng = random.Random(0)

    def fired(cfg: HealthConfig) -> bool:
        mon = HealthMonitor(cfg)
        for step in range(1, 21):
            ps = [rng.betavariate(1, 3) for _ in range(4)]
            mean = sum(sum(rng.random() < p for _ in range(8)) / 8 for p in ps) / 4
            if mon.check(step, {"reward_mean": mean}):
                return True
        return False

    runs = 400
    assert sum(fired(HealthConfig()) for _ in range(runs)) / runs < 0.10
    assert sum(fired(HealthConfig(reward_z=0)) for _ in range(runs)) / runs > 0.6


def test_a_reward_stuck_near_0_or_1_says_what_to_change() -> None:
    # the run: reward ~0 on 12 of 15 steps (a warm start too weak to find the reward)
    weak = [0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0]
    alerts = feed(HealthMonitor(HealthConfig()), [{"reward_mean": r} for r in weak])
    fired = [i + 1 for i, a in enumerate(alerts) if any(x.startswith("reward saturated near 0") for x in a)]
    assert fired and fired[0] <= 7 and not any(alerts[:4])  # not before a window of steps
    first = next(x for x in alerts[fired[0] - 1] if x.startswith("reward saturated"))
    assert f"at step {fired[0]}" in first and "the warm start is too weak" in first and "sft.steps" in first
    solved = feed(HealthMonitor(HealthConfig()), [{"reward_mean": r} for r in (0.9, 1.0, 1.0, 0.97, 1.0, 1.0)])
    assert solved[-1] == [
        "reward saturated near 1: mean 0.994 over the last 5 steps (>= 0.95) at step 6. Almost every episode "
        "succeeds, so there is little left to learn: a harder task or curriculum level, or the run is done"]
    # a reward in between raises nothing; the bounds are the config's
    assert not any(feed(HealthMonitor(HealthConfig()), [{"reward_mean": 0.06 + 0.01 * i} for i in range(9)]))
    assert feed(HealthMonitor(HealthConfig(window=2, reward_low=0.2)), [{"reward_mean": 0.15}] * 2)[-1]
    with pytest.raises(ConfigError, match="reward_low < reward_high"):
        HealthConfig(reward_low=0.5, reward_high=0.5).validate()


def test_disabled_monitor_and_flags_and_summary() -> None:
    assert feed(HealthMonitor(HealthConfig(enabled=False)), [{"kl_ref": 9.0}]) == [[]]
    mon = HealthMonitor(HealthConfig())
    alerts = mon.check(3, {"kl_ref": 1.0})
    flags = mon.flags(alerts)
    assert flags == {"health_kl": 1, "health_entropy": 0, "health_grad_norm": 0, "health_reward": 0,
                     "health_saturated": 0, "health_mismatch": 0, "health_ess": 0, "health_capped": 0}
    rows = [{"step": 3, **flags}, {"step": 4, "health_kl": 0}, {"step": 5, "health_kl": 1}]
    assert health_summary(rows) == {"kl": [3, 5]}


def test_mismatch_ess_and_capped_weights_are_named() -> None:
    mon = HealthMonitor(HealthConfig(max_mismatch_k3=0.05, max_mismatch_abs_dlogp=0.2, min_ess=0.5,
                                     max_capped_frac=0.2))
    # an engine whose log-probs are 0.5 nats low on every token: k3 = e^0.5 - 1.5 = 0.149
    shifted = {"mismatch_k3": 0.149, "mismatch_abs_dlogp_mean": 0.5, "mismatch_ess": 1.0,
               "mismatch_capped_frac": 1.0}
    alerts = mon.check(4, shifted)
    assert ("engine/learner mismatch: k3 0.149 > 0.05, mean |dlogp| 0.5 > 0.2 at step 4" in alerts
            and "correction weights capped or masked on 1 > 0.2 of policy tokens at step 4" in alerts)
    assert mon.flags(alerts)["health_mismatch"] == 1 and mon.flags(alerts)["health_ess"] == 0
    assert mon.check(5, {"mismatch_ess": 0.3}) == ["correction ESS 0.3 < 0.5 at step 5"]
    # a step without mismatch numbers (no policy tokens) raises nothing, and neither does float noise
    assert mon.check(6, {}) == []
    assert mon.check(7, {"mismatch_k3": 1e-9, "mismatch_abs_dlogp_mean": 1e-5, "mismatch_ess": 1.0,
                         "mismatch_capped_frac": 0.0}) == []


@pytest.mark.parametrize("override, match", [
    ("health.window=0", "health.window"),
    ("health.min_ess=1.5", "health.min_ess"),
    ("health.max_mismatch_k3=0", "max_mismatch_k3"),
    ("health.reward_patience=3", "reward_patience"),
    ("health.reward_z=-1", "reward_z"),
    ("health.max_kl_ref=0", "max_kl_ref"),
])
def test_bad_thresholds_are_config_errors(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config("cpu-quickstart", [override])


@pytest.mark.slow  # a real Trainer run
def test_a_run_without_kl_penalty_says_kl_is_not_watched_unless_asked(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """ppo.kl_coef=0 keeps no reference, so the KL check has nothing to read: the run says so when
    it starts and in its last lines (and the progress line shows no kl_ref, rather than 0).
    health.watch_kl=true keeps the reference for the check alone: kl_ref is logged and alerts,
    and the training is the same step for step (the penalty stays out of the loss)."""
    from agentgym.trainer.evaluation import report_lines

    base = ["threads=1", "log.progress=true", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
            "sft.steps=1", "sft.batch_size=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
            "rollout.samples_per_task=2", "ppo.steps=2", "ppo.lr=1e-2", "ppo.kl_coef=0",
            "ppo.entropy_coef=0.01",  # a gradient when nothing scores (a step with none takes no optimizer step)
            "health.max_kl_ref=1e-9", "sft.min_wellformed=0", "log.eval_episodes=4", "log.eval_episodes_final=0"]
    Trainer(load_config("cpu-quickstart", [*base, f"log.run_dir={tmp_path / 'off'}"])).run()
    cap = capsys.readouterr()
    out = cap.out + cap.err
    off = read_metrics(tmp_path / "off", "train")
    assert "health: KL to the reference not watched (ppo.kl_coef=0" in out and "kl_ref" not in out
    assert all("kl_ref" not in r and r["health_kl"] == 0 for r in off)
    assert "KL to the reference not watched" in [x for x in report_lines(str(tmp_path / "off")) if x.startswith("health:")][0]
    Trainer(load_config("cpu-quickstart", [*base, f"log.run_dir={tmp_path / 'on'}", "health.watch_kl=true"])).run()
    on = read_metrics(tmp_path / "on", "train")
    assert "not watched" not in capsys.readouterr().out
    assert on[0]["kl_ref"] == pytest.approx(0, abs=1e-6) and on[1]["kl_ref"] > 0 and on[1]["health_kl"] == 1
    assert [r["loss"] for r in on] == [r["loss"] for r in off]  # watching does not train
    assert "not watched" not in " ".join(report_lines(str(tmp_path / "on")))


def test_trainer_names_alerts_in_progress_output_and_metrics(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config("cpu-quickstart", [
        f"log.run_dir={tmp_path}", "threads=1", "log.progress=false", "log.plots=false",
        "log.tensorboard=false", "log.eval_every=0", "sft.steps=1", "sft.batch_size=2",
        "env.max_action_tokens=16", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "ppo.steps=2", "ppo.lr=1e-2", "ppo.kl_coef=0.05", "health.max_kl_ref=1e-9", "sft.min_wellformed=0",
        "ppo.carry_sft_optimizer=true",  # the warm start's momentum moves the policy when nothing scores
        "log.eval_episodes=4", "log.eval_episodes_final=0"])
    Trainer(cfg).run()
    rows = read_metrics(tmp_path, "train")
    out = capsys.readouterr().out
    # the first step samples from the reference itself (KL 0); the second has moved away
    assert rows[0]["health_kl"] == 0 and rows[1]["health_kl"] == 1
    assert rows[1]["health_alerts"][0].startswith("KL to reference") and "at step 2" in rows[1]["health_alerts"][0]
    assert "health: KL to reference" in out and "> 1e-09 at step 2" in out
