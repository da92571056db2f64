"""The health monitor's reward check: how often it fires when nothing is wrong, and when it should.

    .venv/bin/python bench/health_reward_alert.py                      # ~1 min on one core
    .venv/bin/python bench/health_reward_alert.py --runs R/seed-*/ppo  # and what it says on real runs

1. False alarms: PPO runs of 4 tasks x 8 samples a step whose success rates do not change (each
   task's rate drawn from a Beta distribution, the same for every step). For each
   ``health.reward_z``, the share of runs in which ``HealthMonitor`` raised the reward alert at
   least once, over 20 and over 60 steps.
2. Detection: the same, with every task's success rate falling linearly by 0.2 or 0.4 over 20 steps.
3. With ``--runs``: the steps at which each ``reward_z`` fires on the sampled rewards a run logged
   (``metrics.jsonl``, phase ``train``), beside the steps the run itself logged.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from agentgym.trainer.health import HealthConfig, HealthMonitor

ZS = (0.0, 2.0, 2.5, 3.0)


def fired_steps(rewards: list[float], z: float) -> list[int]:
    mon = HealthMonitor(HealthConfig(reward_z=z))
    return [step for step, r in enumerate(rewards, 1)
            if mon.flags(mon.check(step, {"reward_mean": r}))["health_reward"]]


def simulated_run(rng: random.Random, steps: int, a: float, b: float, fall: float = 0.0,
                  tasks: int = 4, samples: int = 8) -> list[float]:
    """Mean sampled reward per step; every task's success rate drops by ``fall`` over ``steps``."""
    out = []
    for step in range(steps):
        ps = [min(1.0, max(0.0, rng.betavariate(a, b) - fall * step / steps)) for _ in range(tasks)]
        out.append(sum(sum(rng.random() < p for _ in range(samples)) / samples for p in ps) / tasks)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="simulated runs per cell (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", nargs="*", default=[], help="run dirs whose logged rewards to check")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    head = " | ".join(f"reward_z={z:g}" for z in ZS)
    print(f"| rewards (4 tasks x 8 samples a step) | steps | {head} |")
    print("|---|---|" + "---|" * len(ZS))
    cases = [("unchanged, Beta(1, 3) (mean 0.25)", 1, 3, 0.0, 20), ("unchanged, Beta(1, 3)", 1, 3, 0.0, 60),
             ("unchanged, Beta(2, 2) (mean 0.5)", 2, 2, 0.0, 20), ("unchanged, Beta(2, 2)", 2, 2, 0.0, 60),
             ("falling by 0.2, Beta(1, 3)", 1, 3, 0.2, 20), ("falling by 0.4, Beta(1, 3)", 1, 3, 0.4, 20)]
    for name, a, b, fall, steps in cases:
        runs = [simulated_run(rng, steps, a, b, fall) for _ in range(args.n)]
        shares = [sum(bool(fired_steps(r, z)) for r in runs) / args.n for z in ZS]
        print(f"| {name} | {steps} | " + " | ".join(f"{s:.3f}" for s in shares) + " |")
    for run in args.runs:
        rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in rows if r.get("phase") == "train" and "reward_mean" in r]
        logged = [r["step"] for r in train if r.get("health_reward")]
        rewards = [r["reward_mean"] for r in train]
        print(f"{run}: {len(train)} steps; logged {logged or 'none'}; "
              + "; ".join(f"z={z:g}: {fired_steps(rewards, z) or 'none'}" for z in ZS))


if __name__ == "__main__":
    main()
