"""What ``ppo.carry_sft_optimizer`` does to PPO's first steps, measured.

    python bench/sft_optimizer_carry.py                  # 150 warm-start steps, then 10 PPO steps x 2

One warm start of the quickstart (``--sft-steps`` steps of 32 oracle demonstrations at the
recipe's lr), then the same PPO steps twice from its weights: with AdamW's state carried over
from the warm start (first and second moments and step count) and with a fresh AdamW. Per
PPO step: ``adam_step_rms`` (RMS of m_hat / (sqrt(v_hat) + eps) over the weights with a
gradient: the step in units of lr; 1 = sign-sized), the KL to the warm start, the gradient
norm and the sampled reward. The two runs see the same tasks and seeds.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile

import torch


def main() -> None:
    from agentgym.trainer.config import load_config
    from agentgym.trainer.sft import run_sft
    from agentgym.trainer.train import Trainer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--ppo-steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        over = ["log.eval_every=0", "log.progress=false", "log.plots=false", "log.tensorboard=false",
                "log.checkpoint_every=0", f"sft.steps={args.sft_steps}", "ppo.kl_coef=0.05"]
        cfg = load_config("cpu-quickstart", [*over, f"log.run_dir={tmp}/warm", "ppo.carry_sft_optimizer=true"])
        warm = Trainer(cfg)
        run_sft(cfg, warm.learner, warm.rollouts, warm.log)  # leaves the warm start's AdamW state
        state = copy.deepcopy(warm.learner.model.state_dict())
        carried = {n: warm.learner.optimizer.state[p] for n, p in warm.learner.model.named_parameters()
                   if p in warm.learner.optimizer.state}
        rows: dict[str, list[dict[str, float]]] = {}
        for carry in (True, False):
            c = load_config("cpu-quickstart", [*over, f"log.run_dir={tmp}/{carry}", "sft.steps=0"])
            t = Trainer(c)
            t.learner.model.load_state_dict(state)
            t.rollouts.refresh()
            t.learner.start_reference(resumed=False)  # the warm-started weights are the anchor
            if carry:
                for name, p in t.learner.model.named_parameters():
                    if name in carried:
                        t.learner.optimizer.state[p] = {k: v.clone() if torch.is_tensor(v) else v
                                                  for k, v in carried[name].items()}
            rows[str(carry)] = [t.train_step(i) for i in range(args.ppo_steps)]
            t.close()
        warm.close()
    print(f"\nwarm start: {args.sft_steps} steps x 32 demos; then PPO (lr 1e-4, KL 0.05), same tasks")
    print("step | adam_step_rms carried / fresh | kl_ref carried / fresh | grad_norm carried / fresh | reward carried / fresh")
    for i in range(args.ppo_steps):
        a, b = rows["True"][i], rows["False"][i]
        print(f"{i + 1:4d} | {a['adam_step_rms']:8.3f} / {b['adam_step_rms']:.3f}       | "
              f"{a.get('kl_ref', 0):.4f} / {b.get('kl_ref', 0):.4f}       | {a['grad_norm']:.3f} / {b['grad_norm']:.3f}"
              f"              | {a['reward_mean']:.3f} / {b['reward_mean']:.3f}")
    print(f"\nload average {os.getloadavg()}")


if __name__ == "__main__":
    main()
