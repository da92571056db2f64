"""One PPO update on fixed episodes, in one plain process or under torchrun (FSDP2, gloo).

    python tests/trainer/_fsdp_worker.py EPISODES.jsonl OUT_DIR [overrides...]
    torchrun --nproc_per_node 2 tests/trainer/_fsdp_worker.py EPISODES.jsonl OUT_DIR [overrides...] \
        [--and OUT_DIR2 [more overrides...]]

Each rank takes the episodes of its share of the tasks (as ``Trainer.train_step`` assigns
them), runs ``ppo_update`` and rank 0 writes ``OUT_DIR/result.pt``: the update's metrics, the
full gradient and the full weights after the update. ``tests/trainer/test_fsdp.py`` compares
the two. ``--and``: a second update in the same processes (one torchrun start-up less), from
the same initial weights, with the overrides plus the more overrides, written to ``OUT_DIR2``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main(episodes: str, out: str, overrides: list[str]) -> None:
    from agentgym.trainer import distributed as D
    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer
    from agentgym.trainer.update import compute_advantages, ppo_update, score
    from agentgym.trajectory import read_jsonl

    torch.set_num_threads(1)
    cfg = load_config("cpu-quickstart", [f"log.run_dir={out}/run", *overrides])
    trainer = Trainer(cfg)
    s = trainer.learner
    trajs = [Episode.from_record(t) for t in read_jsonl(episodes)]
    k = cfg.rollout.samples_per_task
    mine = D.group_tasks(cfg.rollout.tasks_per_step, s.dist)
    rows = [i for i in range(len(trajs)) if i // k in mine]
    batch = make_batch([trajs[i] for i in rows], [i // k for i in rows], pad_id=s.pad_id)
    batch = score(batch, cfg, 0, s.ranks)
    metrics = {**compute_advantages(s, batch, cfg, 0), **ppo_update(s, batch, cfg, 0)}
    grads = {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
             for n, p in s.model.named_parameters()}
    weights = D.full_state_dict(s.model)
    ranks = s.dist.world if s.dist is not None else 1
    if s.dist is None or s.dist.is_main:
        torch.save({"metrics": metrics, "grads": grads, "weights": weights, "world": ranks},
                   Path(out) / "result.pt")
    trainer.close()
    D.barrier()


if __name__ == "__main__":
    args = sys.argv[3:]
    then = args.index("--and") if "--and" in args else len(args)
    main(sys.argv[1], sys.argv[2], args[:then])
    if then < len(args):
        main(sys.argv[1], args[then + 1], args[:then] + args[then + 2 :])
