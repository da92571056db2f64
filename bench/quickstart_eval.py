"""What PPO adds on top of the warm start, measured on fixed tasks at the sampling temperature.

The training curve compares different tasks at every step (4 new tasks per step), and the
greedy evaluation is already saturated by the warm start; both hide what PPO changes. This
script loads two sets of weights of one run (``warm_start/`` and the latest checkpoint),
samples the *same* ``--episodes`` tasks with the *same* sampling seed from each at
``--temperature`` (the recipe's 1.0), and prints reward, exact answers and malformed actions
side by side with a binomial standard error.

    python bench/quickstart_eval.py runs/cpu-quickstart --episodes 512
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from agentgym.trainer.config import load_config
from agentgym.trainer.episodes import Rollouts
from agentgym.trainer.evaluation import collect_fixed, eval_record
from agentgym.trainer.learner import Learner
from agentgym.trainer.model.files import load_weights
from agentgym.trainer.stats import gain

SEED_BASE = 5_000_000  # apart from the eval (0..), warm-start (10,000..) and PPO (1,000,000..) seeds
# (so these tasks are not the ones the trainer's own evaluations use)


def evaluate(rollouts: Rollouts, weights: str, episodes: int, temperature: float) -> dict[str, Any]:
    """Sample ``episodes`` fixed tasks with ``weights``, in chunks of the run's eval collector."""
    load_weights(rollouts.learner.model, weights)
    rollouts.engine.sync_weights(rollouts.learner.model)
    trajs = collect_fixed(rollouts.eval_collector, episodes, temperature=temperature, sample_seed=777,
                          options=rollouts.cfg.env.eval_options, seed_base=SEED_BASE)
    return eval_record(trajs, temperature)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--episodes", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=None, help="default: the run's rollout.temperature")
    ap.add_argument("--chunk", type=int, default=64, help="episodes sampled in one batch")
    ap.add_argument("--after", default=None, help="weights to compare (default: the run's latest checkpoint)")
    args = ap.parse_args()
    run = Path(args.run_dir)
    cfg = load_config(run / "config.yaml", ["log.progress=false", "log.tensorboard=false", "sft.steps=0",
                                             f"log.eval_episodes={args.chunk}"])
    temperature = args.temperature if args.temperature is not None else cfg.rollout.temperature
    torch.set_num_threads(max(cfg.threads, 1))
    setup = Rollouts(cfg, Learner(cfg))
    try:
        rows = {}
        for name, weights in (("warm start", str(run / "warm_start")), ("after PPO", args.after or str(run))):
            t0 = time.perf_counter()
            rows[name] = evaluate(setup, weights, args.episodes, temperature)
            rows[name]["seconds"] = time.perf_counter() - t0
    finally:
        setup.close()
    print(f"{run}: {args.episodes} fixed tasks, temperature {temperature}")
    print(f"{'weights':<12}{'reward':>9}{'success [95% interval]':>26}{'malformed/ep':>14}{'seconds':>9}")
    for name, m in rows.items():
        print(f"{name:<12}{m['reward_mean']:>9.3f}{m['success']:>10.3f} [{m['success_lo']:.3f}, "
              f"{m['success_hi']:.3f}]{m['errors_mean']:>14.3f}{m['seconds']:>9.1f}")
    a, b = rows["warm start"], rows["after PPO"]
    g = gain(a, b)
    assert g is not None
    print(f"PPO: reward {b['reward_mean'] - a['reward_mean']:+.3f}, success {g['gain']:+.3f} ± {g['se']:.3f} "
          f"({g['z']:.1f} SE; paired SE {g['se_paired']:.3f})")

if __name__ == "__main__":
    main()
