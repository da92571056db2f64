"""End to end: warm start + PPO on a real environment; the reward rises, and PPO beats its placebo.

The loop on a task a few SFT steps nearly solve: Math-v1 on a one-answer dataset ("reply with
the number 7"; sparse reward) with the tiny GPT-OSS. A 30-step warm start leaves about 40% of the
sampled answers malformed; PPO must fix that. Seeded and deterministic on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.trainer.config import load_config
from agentgym.trainer.metrics import read_metrics


@pytest.mark.slow
def test_ppo_beats_its_placebo_on_held_out_problems_when_the_reward_has_something_to_teach(tmp_path: Path) -> None:
    """The placebo gap, end to end and cheap (~3 min): the same one-answer task after a 30-step
    warm start (sampled at T=1, ~60% of its held-out answers right), then 20 PPO steps on the real reward against 20 on rewards
    permuted within each batch, from the same saved warm start, scored on held-out rows (the
    dataset's eval split) at the training temperature. Only the reward's information differs.
    This is the mechanism, not the CPU quickstart: on cpu-quickstart the placebo gap is what
    bench/RESULTS.md reports for fresh seeds."""
    from agentgym.trainer.controls import CONTROLS_DIR, final_eval, run_with_controls, warm_eval
    from agentgym.trainer.stats import gain

    data = tmp_path / "say7.jsonl"
    data.write_text("".join(json.dumps({"id": f"say-{i}", "question": f"Request {i}: reply with the number 7.",
                                        "answer": "7"}) + "\n" for i in range(200)))
    run = tmp_path / "run"
    cfg = load_config("cpu-quickstart", [
        f"log.run_dir={run}", "seed=0", "threads=1", "env.id=agentgym/Math-v1",
        f"env.kwargs={{dataset: {data}}}", "env.reward_mode=sparse",
        "env.max_turns=1", "env.max_action_tokens=48", "sft.steps=30", "sft.batch_size=8", "sft.teacher=oracle",
        "sft.lr=3e-3", "sft.schedule=cosine", "sft.warmup_steps=5", "sft.check_every=0", "sft.min_wellformed=0",
        "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null", "env.prompt=harmony",
        "ppo.steps=20", "ppo.lr=1e-3", "ppo.warmup_steps=2", "ppo.kl_coef=0",
        "ppo.group_std_normalize=true", "ppo.baseline_scale=1", "ppo.carry_sft_optimizer=true",
        "rollout.temperature=1.0", "rollout.tasks_per_step=4", "rollout.samples_per_task=8",
        "log.eval_every=20", "log.eval_episodes=24", "log.eval_episodes_final=0", "log.eval_samples=4",
        "log.eval_seed_start=0", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false",
        "correction.mode=seq_tis", "controls=[placebo]"])
    _, lines = run_with_controls(cfg)
    ppo, placebo, warm = final_eval(run), final_eval(run / CONTROLS_DIR / "placebo"), warm_eval(run)
    assert ppo is not None and placebo is not None and warm is not None and ppo["sampled_problems"] >= 20
    # measured (seed 0, 24 problems x 4 at T=1): warm start 0.625, PPO 0.833, placebo 0.000. The gap
    # to the placebo is mostly the placebo's damage (lr 1e-3, no KL), so PPO's own gain is asserted too.
    # The bounds hold for seed 0 (on Intel Xeon and AMD EPYC), not for every seed: on seeds 1-4 (AMD)
    # the placebo gap was 0.84, 0.17 (z 4.0: the placebo kept 0.68), 0.85, 0.81, PPO's own gain
    # 0.21-0.25 (z >= 5), and seed 4's training reward rose by only 0.05. A float change that moves
    # seed 0's trajectory can fail this test without a bug; 12 PPO steps failed on 2 of 6 seeds.
    g = gain(placebo, ppo, "sampled_")  # PPO - placebo, paired on the same held-out problems
    assert g is not None and g["gain"] >= 0.2 and g["z"] >= 4, (g, lines)
    own = gain(warm, ppo, "sampled_")
    assert own is not None and own["gain"] >= 0.1 and own["z"] >= 2.5, (own, lines)
    # the training reward rises and the malformed answers fall (PPO's run; measured, seed 0: reward
    # 0.56 -> 0.82 and malformed 0.44 -> 0.18 over the first and last 5 steps)
    train = read_metrics(run, "train")
    assert len(train) == 20
    first, last = (sum(r["reward_mean"] for r in rows) / 5 for rows in (train[:5], train[-5:]))
    bad_first, bad_last = (sum(r["errors_mean"] for r in rows) / 5 for rows in (train[:5], train[-5:]))
    assert last > first + 0.1, (first, last)
    assert bad_last < bad_first - 0.05, (bad_first, bad_last)
    # the engine's log-probs of the sampled tokens were the learner's own (float noise apart)
    assert max(r["mismatch_abs_dlogp_max"] for r in train) < 1e-3
    assert (run / "plots" / "reward.png").exists()
