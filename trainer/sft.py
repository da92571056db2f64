"""Warm start: supervised fine-tuning on demonstrations from an environment's oracle policy.

The oracle is run through the real environment, so a demonstration is a real trajectory:
the exact prompt, the oracle's action tokens, the tool results the environment appended.
The loss is the negative log-likelihood of the *policy tokens only* (environment and prompt
tokens are context), which teaches a tiny model the Harmony format (tool call, stop token,
final answer) before PPO.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.batch import make_batch, prefix_forward
from agentgym.trainer.ppo import masked_mean
from agentgym.trajectory import Trajectory

__all__ = ["ORACLES", "demonstrations", "find_oracle", "run_sft", "sft_step"]

# env id -> "module:function(env) -> next action ids". Add yours to warm-start on your env.
ORACLES: dict[str, str] = {
    "agentgym/Math-v0": "agentgym.environments.math.oracle:oracle_action",
    "agentgym/MathCalc-v0": "agentgym.environments.math.oracle:oracle_actions",
}


def find_oracle(env_id: str) -> Callable[[Any], np.ndarray]:
    if env_id not in ORACLES:
        raise ConfigError(f"no oracle policy known for {env_id!r}: warm start (sft.steps > 0) needs "
                          f"one of {sorted(ORACLES)}; register yours in agentgym.trainer.sft.ORACLES "
                          "or set sft.steps=0")
    module, fn = ORACLES[env_id].split(":")
    return getattr(importlib.import_module(module), fn)  # type: ignore[no-any-return]


def demonstrations(env: Any, oracle: Callable[[Any], np.ndarray], seeds: list[int],
                   options: dict[str, Any] | None = None) -> list[Trajectory]:
    """Run the oracle through ``env`` once per seed; the trajectories are the demonstrations."""
    out = []
    for seed in seeds:
        env.reset(seed=seed, options=options)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(oracle(env))
            done = term or trunc
        out.append(env.unwrapped.trajectory)
    return out


def sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajs: list[Trajectory], *,
             pad_id: int, max_grad_norm: float, device: torch.device) -> dict[str, float]:
    """One optimizer step of NLL on the policy tokens of ``trajs``."""
    b = make_batch(trajs, list(range(len(trajs))), pad_id=pad_id).to(device)
    out = prefix_forward(model, b, with_entropy=False)
    m = b.policy_mask
    loss = -masked_mean(out.logprobs, m)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf)
    optimizer.step()
    with torch.no_grad():
        # exp(mean log p) per sequence: 1.0 means the demo is reproduced with certainty
        seq_p = torch.exp((out.logprobs * m).sum(-1) / m.sum(-1).clamp(min=1))
    return {"loss": loss.item(), "grad_norm": float(gn), "demo_token_p": float(seq_p.mean())}


def run_sft(cfg: Any, setup: Any, log: Any) -> dict[str, float]:
    """The warm start of a run: ``cfg.sft.steps`` steps of ``cfg.sft.batch_size`` demos."""
    from agentgym.trainer.metrics import Progress

    sc = cfg.sft
    oracle = find_oracle(cfg.env.id)
    env = setup.make_env()
    opt = torch.optim.AdamW(setup.model.parameters(), lr=sc.lr, weight_decay=0.0)

    def lr_at(i: int) -> float:  # linear warmup, then constant or cosine down to 10% of the peak
        if i < sc.warmup_steps:
            return (i + 1) / sc.warmup_steps
        if sc.schedule == "constant":
            return 1.0
        frac = (i - sc.warmup_steps) / max(1, sc.steps - sc.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    bar = Progress(sc.steps, "warm start", cfg.log.progress)
    stats: dict[str, float] = {}
    try:
        for i in range(sc.steps):
            t0 = time.perf_counter()
            seeds = [sc.seed + i * sc.batch_size + j for j in range(sc.batch_size)]
            trajs = demonstrations(env, oracle, seeds, cfg.env.train_options)
            stats = sft_step(setup.model, opt, trajs, pad_id=setup.pad_id,
                             max_grad_norm=sc.max_grad_norm, device=setup.device)
            sched.step()
            stats.update(lr=float(sched.get_last_lr()[0]), t_step=time.perf_counter() - t0)
            log.log("sft", i + 1, stats)
            bar.update(i + 1, f"loss {stats['loss']:.3f} demo p {stats['demo_token_p']:.3f}")
    finally:
        bar.close()
        env.close()
    setup.sync_engine()  # gathers a sharded (torchrun) policy
    if cfg.ppo.carry_sft_optimizer:
        # PPO continues with the warm start's AdamW moments: a fresh Adam's first steps move
        # every weight by ~lr whatever its gradient (m/sqrt(v) = sign(g)), which on a tiny
        # model turns PPO's small, noisy gradients into large random steps.
        _carry_moments(opt, setup.optimizer)
    return stats


def _carry_moments(src: torch.optim.Optimizer, dst: torch.optim.Optimizer) -> None:
    by_param = {id(p): src.state[p] for g in src.param_groups for p in g["params"] if p in src.state}
    for g in dst.param_groups:
        for p in g["params"]:
            st = by_param.get(id(p))
            if st is not None:
                dst.state[p] = {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()}
