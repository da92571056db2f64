"""Does a bf16 run's update track the fp32 run's? And what do float32 master weights buy?

    python bench/trainer_precision.py                 # lr 1e-6 (the 20B recipe's) and 1e-4, 5 updates

Same 16 episodes (sampled once by the tiny policy, returns spread out), same initial weights,
``--updates`` PPO updates on them (KL 0.1 to the start, seq_tis) in three precisions:

* ``fp32``: float32 parameters and compute (the reference);
* ``bf16 compute + fp32 master``: what ``model.dtype=bfloat16`` does now (autocast in one
  process; FSDP2 mixed precision under torchrun): parameters and AdamW state float32;
* ``bf16 parameters``: what it did before: the parameters themselves in bfloat16.

Printed per run: cosine of the first gradient and of the total weight change with the fp32
run's, the ratio of their norms, and the share of weights the updates moved at all.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import torch


def run(dtype: str, lr: float, updates: int, batch: Any, tmp: str) -> dict[str, Any]:
    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.config import load_config
    from agentgym.trainer.rollout.collector import group_seeds
    from agentgym.trainer.train import Trainer
    from agentgym.trainer.update import compute_advantages, ppo_update, score

    cfg = load_config("cpu-quickstart", [
        "threads=1", "sft.steps=0", "log.eval_every=0", "log.progress=false", "log.plots=false",
        "log.tensorboard=false", f"log.run_dir={tmp}/{dtype}-{lr}", f"ppo.lr={lr}", "ppo.warmup_steps=1",
        "ppo.kl_coef=0.1", "rollout.tasks_per_step=2", "rollout.samples_per_task=8",
        "env.max_action_tokens=32", f"model.dtype={'float32' if dtype == 'fp32' else 'bfloat16'}"])
    t = Trainer(cfg)
    s = t.learner
    if batch is None:
        seeds, groups = group_seeds(1_000_000, 2, 8)
        trajs, _ = t.rollouts.collector.collect(seeds, temperature=1.0, sample_seed=3, options={})
        for i, ep in enumerate(trajs):
            ep.traj.turns[-1].reward += 0.1 * i
        batch = make_batch(trajs, groups, pad_id=s.pad_id)
    if dtype == "bf16 params":  # the old meaning of model.dtype=bfloat16: no master copy
        s.model.to(torch.bfloat16)
        s.params = list(s.model.parameters())
        s.optimizer = torch.optim.AdamW(s.params, lr=lr, weight_decay=0.0)
        s.scheduler = torch.optim.lr_scheduler.LambdaLR(s.optimizer, lambda i: 1.0)
        s.compute_dtype = torch.float32  # nothing to autocast: the weights are bf16 already
    start = torch.cat([p.detach().float().flatten() for p in s.params])
    first_grad = None
    for step in range(updates):
        scored = score(batch, cfg, step, s.ranks)
        compute_advantages(s, scored, cfg, step)
        ppo_update(s, scored, cfg, step)
        if first_grad is None:
            first_grad = torch.cat([p.grad.float().flatten() for p in s.params])
    delta = torch.cat([p.detach().float().flatten() for p in s.params]) - start
    t.close()
    return {"batch": batch, "grad": first_grad, "delta": delta}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 1e-4])
    ap.add_argument("--updates", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cos = torch.nn.functional.cosine_similarity
    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        batch = None
        for lr in args.lrs:
            ref = run("fp32", lr, args.updates, batch, tmp)
            ref["grad"], ref["delta"] = ref["grad"].double(), ref["delta"].double()
            batch = ref["batch"]
            print(f"\nlr {lr:g}, {args.updates} updates on the same 16 episodes")
            print("run                        | grad cos | change cos | |change| / fp32's | weights moved")
            for name in ("fp32", "bf16 compute + fp32 master", "bf16 params"):
                r = ref if name == "fp32" else run(name, lr, args.updates, batch, tmp)
                g, d = r["grad"].double(), r["delta"].double()
                print(f"{name:26s} | {float(cos(g, ref['grad'], dim=0)):8.4f} | "
                      f"{float(cos(d, ref['delta'], dim=0)):10.4f} | "
                      f"{float(d.norm() / ref['delta'].norm()):17.3f} | "
                      f"{float((d != 0).float().mean()):.3f}", flush=True)
    print(f"\nload average {os.getloadavg()}")


if __name__ == "__main__":
    main()
