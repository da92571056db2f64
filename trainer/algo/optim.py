"""Optimizer helpers: the learning-rate schedule, AdamW moments carried between phases, step size.

:func:`lr_factor` is the schedule (linear warmup, then constant or cosine); :func:`save_moments` /
:func:`load_moments` keep the warm start's AdamW state by parameter name so PPO can start from it;
:func:`adam_step_rms` measures the size of the last update; :func:`check_finite` stops a run on a
NaN or inf loss with what to change.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from agentgym.errors import NonFiniteError

from ..distributed import all_reduce_sum

__all__ = ["adam_step_rms", "carry_moments", "check_finite", "load_moments", "lr_factor", "save_moments"]


def lr_factor(i: int, warmup_steps: int, total: int, schedule: str) -> float:
    """Learning-rate factor at optimizer step ``i`` (0-based): linear warmup over
    ``warmup_steps``, then ``constant`` (1) or ``cosine`` from 1 down to 0.1 at step ``total``."""
    if i < warmup_steps:
        return (i + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    frac = (i - warmup_steps) / max(1, total - warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def check_finite(name: str, x: torch.Tensor, step: int, hint: str) -> None:
    """Raise :class:`NonFiniteError` if ``x`` holds NaN or inf (before anything is written)."""
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NonFiniteError(f"step {step}: {bad} non-finite value(s) in {name}; expected finite "
                             f"numbers. {hint} No checkpoint was written for this step.")


def adam_step_rms(optimizer: torch.optim.Optimizer) -> float:
    """RMS of AdamW's step direction ``m_hat / (sqrt(v_hat) + eps)`` (in units of lr) over the
    elements that had a gradient in the step just taken; all ranks together."""
    total, count = 0.0, 0.0
    for g in optimizer.param_groups:
        b1, b2 = g["betas"]
        for p in g["params"]:
            st = optimizer.state.get(p)
            if p.grad is None or not st or "exp_avg" not in st:
                continue
            local = (lambda t: t.to_local() if hasattr(t, "to_local") else t)  # noqa: E731
            t = float(st["step"])
            m, v, grad = local(st["exp_avg"]), local(st["exp_avg_sq"]), local(p.grad)
            u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + g["eps"])
            hit = grad != 0
            total += float(u[hit].double().pow(2).sum())
            count += float(hit.sum())
    total, count = all_reduce_sum(total), all_reduce_sum(count)
    return math.sqrt(total / count) if count else 0.0


def carry_moments(src: torch.optim.Optimizer, dst: torch.optim.Optimizer) -> None:
    by_param = {id(p): src.state[p] for g in src.param_groups for p in g["params"] if p in src.state}
    for g in dst.param_groups:
        for p in g["params"]:
            st = by_param.get(id(p))
            if st is not None:
                dst.state[p] = {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()}


def save_moments(opt: torch.optim.Optimizer, model: torch.nn.Module, path: Any) -> None:
    """The warm start's AdamW state (moments and step count) by parameter name, to ``path``."""
    names = {id(p): n for n, p in model.named_parameters()}
    state = {names[id(p)]: {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in opt.state[p].items()}
             for g in opt.param_groups for p in g["params"] if p in opt.state and id(p) in names}
    torch.save(state, path)


def load_moments(path: Any, model: torch.nn.Module, dst: torch.optim.Optimizer) -> None:
    """Start ``dst`` (the run's AdamW) from a saved warm start's moments, as if the warm start
    had run in this process (``ppo.carry_sft_optimizer``). Parameters must match by name."""
    from pathlib import Path

    from agentgym.errors import CheckpointError

    if not Path(path).exists():
        raise CheckpointError(f"{path} is missing: a warm start saved by agentgym-train holds its AdamW "
                              "state there; load one saved by a run with sft.steps > 0, or set "
                              "ppo.carry_sft_optimizer=false")
    state = torch.load(path, map_location="cpu", weights_only=True)
    params = dict(model.named_parameters())
    unknown = sorted(set(state) - set(params))
    if unknown:
        raise CheckpointError(f"{path}: optimizer state for parameters this model lacks: {unknown[:3]}")
    for name, st in state.items():
        p = params[name]
        # "step" stays where AdamW keeps it (a CPU tensor unless fused / capturable)
        dst.state[p] = {k: v.to(p.device) if torch.is_tensor(v) and k != "step" else v for k, v in st.items()}
