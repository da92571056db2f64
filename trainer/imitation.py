"""The imitation arms' update, and the episode filters of the controls.

    metrics = imitation_update(learner, cfg, trajs, step)

``algo: rft`` (rejection-sampling fine-tuning, or expert iteration) passes the policy's own
:func:`successful` episodes of the step: the strongest cheap baseline for RL with an outcome
reward. ``algo: raft`` (best-of-group, reward-ranked fine-tuning) passes each group's best
episode (:func:`best_of_group`). ``algo: sft`` passes oracle demonstrations of as many new train problems as PPO's
episodes: the ceiling. Either way the update is the negative log-likelihood of the episodes'
policy tokens (environment and prompt tokens are context), with the run's optimizer and lr
schedule, ``ppo.epochs`` x ``ppo.minibatches`` optimizer steps and ``ppo.micro_batch_tokens``
micro-batches, exactly the budget of PPO's update (``update.py``): the arms differ in what
they learn from, not in how far they may move. A step with nothing to imitate (no success)
takes no optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .algo.batch import make_batch, micro_batches
from .algo.episode import Episode
from .algo.optim import adam_step_rms, check_finite
from .config import TrainConfig

if TYPE_CHECKING:
    from .learner import Learner

__all__ = ["imitation_update"]


def imitation_update(learner: Learner, cfg: TrainConfig, trajs: Sequence[Episode], step: int, *,
                     temperature: float = 1.0) -> dict[str, float]:
    """NLL of the policy tokens of ``trajs`` (Episode records) with the run's optimizer (module doc), under the policy at
    ``temperature`` (RFT: the rollout temperature its episodes were sampled at) -> metrics:
    ``loss`` (mean over the update's optimizer steps), ``grad_norm``, ``adam_step_rms``,
    ``imitation_episodes`` and ``imitation_tokens``."""
    p = cfg.ppo
    if not trajs:
        return {"imitation_episodes": 0.0, "imitation_tokens": 0.0, "update_skipped": 1.0}
    b = make_batch(list(trajs), list(range(len(trajs))), pad_id=learner.pad_id).to(learner.device)
    B = len(b)
    gen = torch.Generator().manual_seed(cfg.seed * 104729 + step)
    losses, norms = [], []
    for _ in range(p.epochs):
        order = torch.randperm(B, generator=gen) if p.minibatches > 1 else torch.arange(B)
        for mb in order.chunk(min(p.minibatches, B)):
            n_tok = max(float(b.policy_mask[mb].sum()), 1.0)
            learner.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for rows in micro_batches(b.lengths, mb, p.micro_batch_tokens):
                sub = b.select(rows)
                out = learner.forward(learner.model, sub, temperature=temperature, entropy=False)
                loss = -(out.logprobs.float() * sub.policy_mask).sum() / n_tok
                check_finite("loss", loss.detach(), step, "Lower ppo.lr.")
                loss.backward()
                total += loss.item()
            params = [q for q in learner.params if q.grad is not None]
            gn = torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm or math.inf)
            check_finite("grad norm", gn.detach(), step, "Lower ppo.lr or ppo.max_grad_norm.")
            learner.optimizer.step()
            learner.scheduler.step()
            losses.append(total)
            norms.append(float(gn))
    return {"loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms),
            "adam_step_rms": adam_step_rms(learner.optimizer), "imitation_episodes": float(B),
            "imitation_tokens": float(b.policy_mask.sum())}
