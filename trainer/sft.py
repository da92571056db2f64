"""Warm start: supervised fine-tuning on demonstrations from a teacher run through the env.

The teacher is run through the real environment, so a demonstration is a real trajectory:
the exact prompt, the teacher's action tokens, the tool results the environment appended.
The loss is the negative log-likelihood of the *policy tokens only* (environment and prompt
tokens are context), which teaches a tiny model the Harmony format (tool call, stop token,
final answer) before PPO.

Teachers (``sft.teacher``, :data:`TEACHERS`): ``oracle`` is the environment's perfect
policy; ``guesser`` is an *imperfect* teacher: the oracle, except that on a fraction
``sft.skip_tool`` of the episodes it skips the tools, restates the arithmetic in its
analysis channel and answers a guess that is right only ``sft.guess_right`` of the time
(otherwise one digit is off); ``blind-guesser`` guesses without the analysis message. A
policy that imitates it mostly guesses (its greedy first decision is the guessing mode) but
has seen the tool-using mode, which is what leaves PPO room: a sparse outcome reward moves
the first decision to the tool. ``sign-flipper`` is imperfect in a narrower way: on a
fraction ``sft.sign_error`` of the episodes its calculator call flips the sign of the
expression's first number (``78 - 83`` -> ``-78 - 83``), and it answers the wrong result it
got back. Every demonstration still copies the question's numbers into the call and the
tool's output into the answer exactly, so imitating it keeps those skills intact and learns
one bad habit, a leading minus, whose fix is the same on every task: a sparse outcome reward
can unlearn it.
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
from agentgym.trajectory import Trajectory

__all__ = ["ORACLES", "TEACHERS", "demonstrations", "find_oracle", "flip_sign", "guess_answer",
           "guessing_teacher", "make_teacher", "run_sft", "sft_step", "sign_flipping_teacher"]

Policy = Callable[[Any], np.ndarray]  # env -> the next action's token ids

# env id -> "module:function(env) -> next action ids". Add yours to warm-start on your env.
ORACLES: dict[str, str] = {
    "agentgym/Math-v1": "agentgym.environments.math.oracle:oracle_action",
    "agentgym/MathCalc-v1": "agentgym.environments.math.oracle:oracle_actions",
}


def find_oracle(env_id: str) -> Callable[[Any], np.ndarray]:
    if env_id not in ORACLES:
        raise ConfigError(f"no oracle policy known for {env_id!r}: warm start (sft.steps > 0) needs "
                          f"one of {sorted(ORACLES)}; register yours in agentgym.trainer.sft.ORACLES "
                          "or set sft.steps=0")
    module, fn = ORACLES[env_id].split(":")
    return getattr(importlib.import_module(module), fn)  # type: ignore[no-any-return]


def guess_answer(answer: str, rng: np.random.Generator, right: float) -> str:
    """A guess at ``answer``: itself with probability ``right``, else one digit changed
    (``85`` -> ``89``, ``-7/12`` -> ``-7/13``): the kind of slip mental arithmetic makes."""
    digits = [i for i, ch in enumerate(answer) if ch.isdigit()]
    if rng.random() < right or not digits:
        return answer
    i = digits[int(rng.integers(len(digits)))]
    starts_number = (i == 0 or not answer[i - 1].isdigit()) and i + 1 < len(answer) and answer[i + 1].isdigit()
    choices = [d for d in "0123456789" if d != answer[i] and not (starts_number and d == "0")]
    return answer[:i] + choices[int(rng.integers(len(choices)))] + answer[i + 1:]


def guessing_teacher(oracle: Policy, *, skip_tool: float, guess_right: float,
                     show_work: bool = True) -> Policy:
    """The oracle, except on a fraction ``skip_tool`` of episodes: there it answers at once
    with :func:`guess_answer` (no tool call), after restating the arithmetic (the task's
    ``expression``, when it has one) in its analysis channel if ``show_work``: it does the
    sum in its head. The choice and the guess are drawn from the episode's seed, so every
    turn of an episode agrees and demonstrations are reproducible."""

    def act(env: Any) -> np.ndarray:
        e = env.unwrapped
        rng = np.random.default_rng([int(e.trajectory.seed or 0), 0x9E55])
        if rng.random() >= skip_tool:
            return oracle(env)
        guess = guess_answer(str(e.task.answer), rng, guess_right)
        work = e.task.meta.get("expression") if show_work else None
        return np.asarray(e.codec.final_ids(guess, analysis=work), dtype=np.int64)

    return act


def flip_sign(expression: str) -> str:
    """``expression`` with the sign of its first number flipped (``78 - 83`` -> ``-78 - 83``,
    ``-3 + 4`` -> ``3 + 4``): a slip whose fix is the same on every task (never write it)."""
    return expression[1:] if expression.startswith("-") else "-" + expression


def sign_flipping_teacher(oracle: Policy, *, sign_error: float) -> Policy:
    """The oracle, except on a fraction ``sign_error`` of episodes: there its ``calculator``
    call has the first number's sign flipped (:func:`flip_sign`), and its final answer repeats
    the (wrong) result, as the oracle always does. Drawn from the episode's seed."""

    def act(env: Any) -> np.ndarray:
        e = env.unwrapped
        expr = e.task.meta.get("expression")
        rng = np.random.default_rng([int(e.trajectory.seed or 0), 0x5167])
        if expr is None or getattr(e, "last_calc", "") is not None or rng.random() >= sign_error:
            return oracle(env)  # no expression, past the call, or this episode has no slip
        return np.asarray(e.codec.tool_call_ids("calculator", {"expression": flip_sign(expr)}),
                          dtype=np.int64)

    return act


# name -> (oracle, sft config) -> the demonstration policy
TEACHERS: dict[str, Callable[[Policy, Any], Policy]] = {
    "oracle": lambda oracle, sc: oracle,
    "guesser": lambda oracle, sc: guessing_teacher(oracle, skip_tool=sc.skip_tool,
                                                   guess_right=sc.guess_right),
    "blind-guesser": lambda oracle, sc: guessing_teacher(oracle, skip_tool=sc.skip_tool,
                                                         guess_right=sc.guess_right, show_work=False),
    "sign-flipper": lambda oracle, sc: sign_flipping_teacher(oracle, sign_error=sc.sign_error),
}


def make_teacher(env_id: str, sft_config: Any) -> Policy:
    """The demonstration policy ``sft_config.teacher`` for ``env_id``."""
    return TEACHERS[sft_config.teacher](find_oracle(env_id), sft_config)


def demonstrations(env: Any, oracle: Policy, seeds: list[int],
                   options: dict[str, Any] | None = None) -> list[Trajectory]:
    """Run a teacher (e.g. the oracle) through ``env`` once per seed; the trajectories are the
    demonstrations."""
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
    """One optimizer step of NLL (mean over all policy tokens) on the policy tokens of ``trajs``.

    Demonstrations of very different lengths (a one-turn guess vs a tool call + answer) are
    run in up to two length buckets, each padded to its own longest row, and their gradients
    summed: the same loss as one padded batch, without paying the long rows' width for the
    short ones.
    """
    total = sum(t.num_policy_tokens for t in trajs)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = p_sum = 0.0
    for bucket in _length_buckets(trajs):
        b = make_batch(bucket, list(range(len(bucket))), pad_id=pad_id).to(device)
        out = prefix_forward(model, b, with_entropy=False)
        m = b.policy_mask
        loss = -(out.logprobs * m).sum() / max(total, 1)
        loss.backward()
        loss_sum += loss.item()
        with torch.no_grad():
            # exp(mean log p) per sequence: 1.0 means the demo is reproduced with certainty
            p_sum += float(torch.exp((out.logprobs * m).sum(-1) / m.sum(-1).clamp(min=1)).sum())
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf)
    optimizer.step()
    return {"loss": loss_sum, "grad_norm": float(gn), "demo_token_p": p_sum / len(trajs)}


def _length_buckets(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    """One or two groups of ``trajs`` by length, whichever pads fewer tokens in total."""
    order = sorted(trajs, key=lambda t: len(t.tokens))
    lens = [len(t.tokens) for t in order]
    single = len(lens) * lens[-1]
    best, cut = single, len(lens)
    for k in range(1, len(lens)):
        cost = k * lens[k - 1] + (len(lens) - k) * lens[-1]
        if cost < best:
            best, cut = cost, k
    if best > 0.8 * single:  # a second forward pass must save at least a fifth of the padding
        return [order]
    return [order[:cut], order[cut:]]


def run_sft(cfg: Any, setup: Any, log: Any) -> dict[str, float]:
    """The warm start of a run: ``cfg.sft.steps`` steps of ``cfg.sft.batch_size`` demos."""
    from agentgym.trainer.metrics import Progress

    sc = cfg.sft
    teacher, oracle = make_teacher(cfg.env.id, sc), find_oracle(cfg.env.id)
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
            trajs = demonstrations(env, oracle if i < sc.oracle_steps else teacher, seeds,
                                   cfg.env.train_options)
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
