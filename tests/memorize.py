"""Teach a tiny model to reproduce demonstrations exactly, for tests that serve it greedily.

Greedy decoding reproduces a demonstration token for token when every one of its tokens is the
most likely one given the demonstration's prefix; a probability above 0.5 guarantees that. A
mean over the tokens (the SFT step's ``demo_token_p``) does not: it can pass 0.995 while the one
token that carries a verdict sits near 0.1, and it is measured before the step's update, which at
this learning rate can still flip that token. So the check here is the least likely policy token,
on the weights as they are left, with a margin for other CPUs' float kernels.
"""

from __future__ import annotations

from typing import Any


def least_token_p(model: Any, demos: list[Any], *, pad_id: int) -> float:
    """The smallest probability the model gives any policy token of ``demos`` (teacher-forced)."""
    import torch

    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trainer.learner import batch_forward

    batch = make_batch([Episode.from_record(t) for t in demos], list(range(len(demos))), pad_id=pad_id)
    with torch.no_grad():
        out = batch_forward(model, batch, with_entropy=False)
    logprobs = out.logprobs.masked_fill(batch.policy_mask == 0, 0.0)
    return float(logprobs.min().exp())


def memorize(model: Any, demos: list[Any], *, pad_id: int, lr: float = 5e-3, max_steps: int = 300,
             min_token_p: float = 0.9) -> int:
    """Run the trainer's SFT step until every policy token of every demo has probability above
    ``min_token_p``; returns the steps taken, or fails the test if ``max_steps`` were not enough."""
    import torch

    from agentgym.trainer.sft import sft_step

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for step in range(1, max_steps + 1):
        sft_step(model, opt, demos, pad_id=pad_id, max_grad_norm=1.0, device=torch.device("cpu"))
        if (p := least_token_p(model, demos, pad_id=pad_id)) > min_token_p:
            return step
    raise AssertionError(f"the demonstrations were not memorised in {max_steps} steps: the least likely "
                         f"token has p={p:.3f}, expected > {min_token_p}")
