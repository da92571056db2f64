"""Warm start: supervised fine-tuning on demonstrations from a teacher run through the env.

The teacher is run through the real environment, so a demonstration is a real trajectory:
the exact prompt, the teacher's action tokens, the tool results the environment appended.
The loss is the negative log-likelihood of the *policy tokens only* (environment and prompt
tokens are context), which teaches a tiny model the Harmony format (tool call, stop token,
final answer) before PPO.

Teachers (``sft.teacher``) are declared by the environment at registration
(``Capabilities.teachers``, see :func:`agentgym.register`), each a factory
``factory(oracle, **sft.teacher_kwargs) -> policy``. The built-in envs declare ``oracle``, the
environment's perfect policy: the honest warm start. A teacher that plants a defect on purpose
(for studying what RL undoes, not for measuring what it adds) carries ``defect-`` in its name,
and the closing report says that a gain over its warm start is the defect being undone.

Demonstrations come from the train split; with ``env.exclude_held_out`` a demonstration
whose problem is held out (``rollout/heldout.py``) is replaced by another. With ``sft.check_every``
the warm start stops at a held-out criterion (:func:`stop_reason`): pass@k high enough for
RL to learn from, or pass@1 so high that little room would be left.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentgym.errors import ConfigError, Preempted
from agentgym.oracles import StepPolicy, load_callable
from agentgym.registration import capabilities
from agentgym.trajectory import Trajectory

from .algo.batch import make_batch, micro_batches
from .algo.episode import Episode
from .algo.optim import carry_moments, lr_factor
from .learner import Learner, batch_forward
from .metrics import Progress
from .model.files import STRAY
from .receivers import check_teacher_kwargs
from .rollout.demos import demonstrations, find_oracle

if TYPE_CHECKING:
    from .episodes import Rollouts

__all__ = ["BEST_FILE", "BestCheck", "demo_seeds", "make_teacher", "run_sft", "sft_optimizer", "sft_step", "stop_reason"]


def make_teacher(env_id: str, sft_config: Any) -> StepPolicy:
    """The demonstration policy ``sft_config.teacher`` that ``env_id`` declares, built on its oracle."""
    oracle = find_oracle(env_id)
    teachers = capabilities(env_id).teachers
    if sft_config.teacher not in teachers:
        raise ConfigError(f"sft.teacher={sft_config.teacher!r}: {env_id} declares the teachers "
                          f"{sorted(teachers)}; fix: sft.teacher=oracle")
    kwargs = dict(sft_config.teacher_kwargs)
    check_teacher_kwargs(env_id, sft_config.teacher, kwargs)  # a misspelt name, with the closest one
    factory = load_callable(teachers[sft_config.teacher], "teacher")
    try:  # a required option missing
        inspect.signature(factory).bind(oracle, **kwargs)
    except TypeError as e:
        raise ConfigError(f"sft.teacher_kwargs: teacher {sft_config.teacher!r} of {env_id} does not take "
                          f"{kwargs} ({e}); fix: the options its factory "
                          f"{teachers[sft_config.teacher]} takes, or sft.teacher_kwargs={{}}") from None
    policy: StepPolicy = factory(oracle, **kwargs)
    return policy


def sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajs: list[Trajectory], *,
             pad_id: int, max_grad_norm: float, device: torch.device,
             max_tokens: int = 8192) -> dict[str, float]:
    """One optimizer step of NLL (mean over all policy tokens) on the policy tokens of ``trajs``.

    The demonstrations run in micro-batches of at most ``max_tokens`` padded tokens, bucketed
    by length (:func:`~agentgym.trainer.algo.batch.micro_batches`, as the PPO update does), and
    their gradients are summed: the same loss as one padded batch, without paying the long
    rows' width for the short ones.
    """
    total = sum(t.num_policy_tokens for t in trajs)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = p_sum = 0.0
    full = make_batch([Episode.from_record(t) for t in trajs], list(range(len(trajs))), pad_id=pad_id)
    for rows in micro_batches(full.lengths, torch.arange(len(full)), max_tokens):
        b = full.select(rows).to(device)
        out = batch_forward(model, b, with_entropy=False)
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


BEST_FILE = "warm_best.pt"


class BestCheck:
    """``sft.keep: best``: the weights, AdamW state and schedule of the warm start's best held-out
    check so far (highest pass@1, the earliest of equals), in one file written atomically, so a
    warm start resumed from a checkpoint still knows them. Only trainable parameters are kept
    (with LoRA, the adapters)."""

    def __init__(self, path: Path, *, fresh: bool) -> None:
        self.path, self.step, self.score = path, None, -math.inf
        if fresh:
            path.unlink(missing_ok=True)  # a new warm start in a reused run dir
        elif path.exists():
            head = torch.load(path, weights_only=False, map_location="cpu")
            self.step, self.score = int(head["step"]), float(head["pass_at_1"])

    def offer(self, step: int, score: float, model: torch.nn.Module, opt: Any, sched: Any) -> None:
        if score <= self.score:
            return
        self.step, self.score = step, score
        params = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
        tmp = self.path.with_name(f"{STRAY}{self.path.name}-{os.getpid()}")
        torch.save({"step": step, "pass_at_1": score, "params": params, "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict()}, tmp)
        os.replace(tmp, self.path)

    def restore(self, model: torch.nn.Module, opt: Any, sched: Any) -> None:
        saved = torch.load(self.path, weights_only=False, map_location="cpu")
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in saved["params"]:
                    p.copy_(saved["params"][n].to(p.device, p.dtype))
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["scheduler"])


def stop_reason(sc: Any, check: dict[str, float]) -> str | None:
    """Why the held-out check says to stop the warm start, or None to go on."""
    k = sc.check_samples
    if sc.stop_pass_at_k is not None and check[f"pass_at_{k}"] >= sc.stop_pass_at_k:
        return f"held-out pass@{k} {check[f'pass_at_{k}']:.3f} >= {sc.stop_pass_at_k:g}"
    if sc.stop_pass_at_1 is not None and check["pass_at_1"] >= sc.stop_pass_at_1:
        return f"held-out pass@1 {check['pass_at_1']:.3f} >= {sc.stop_pass_at_1:g}"
    return None


def sft_optimizer(cfg: Any, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """The warm start's AdamW and its schedule (linear warmup, then constant or cosine to 10%)."""
    sc = cfg.sft
    opt = torch.optim.AdamW(model.parameters(), lr=sc.lr, weight_decay=0.0)

    return opt, torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(i, sc.warmup_steps, sc.steps, sc.schedule))


def demo_seeds(cfg: Any, step: int) -> list[int]:
    """The task seeds the warm start demonstrates at its step ``step``: ``sft.batch_size`` new
    train problems a step, from ``sft.seed`` moved by the run's seed (``TrainConfig.stream``)."""
    n = cfg.sft.batch_size
    return [cfg.stream(cfg.sft.seed) + step * n + j for j in range(n)]


def run_sft(cfg: Any, learner: Learner, rollouts: Rollouts, log: Any, *, held: Any = None,
            check: Callable[[int], dict[str, float]] | None = None, start: int = 0,
            optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None,
            checkpoint: Callable[[int, Any, Any], None] | None = None,
            stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The warm start of a run: up to ``cfg.sft.steps`` steps of ``cfg.sft.batch_size`` demos
    from the train split. ``check(step)`` is the held-out stopping check (pass@1, pass@k),
    run every ``sft.check_every`` steps from ``sft.check_from`` on; the warm start stops at the
    first :func:`stop_reason`. Returns the last step's statistics plus ``steps`` (taken) and
    ``stop_reason``. The AdamW it used is left in ``learner.sft_optimizer`` (saved with the warm
    start, so that arms loading it continue from the same moments).

    ``start``, ``optimizer``, ``scheduler``: continue a warm start restored from a checkpoint at
    step ``start`` (demonstrations are a function of the step, so the rest is replayed exactly).
    ``checkpoint(step, optimizer, scheduler)`` is called every ``sft.checkpoint_every`` steps.
    ``stop()`` is asked after every step but the last (SIGTERM, ``preempt.py``): when it says so,
    a checkpoint is written there (if ``checkpoint`` is given and did not just write one) and
    :class:`~agentgym.errors.Preempted` is raised.
    """

    sc = cfg.sft
    teacher, oracle = make_teacher(cfg.env.id, sc), find_oracle(cfg.env.id)
    env = rollouts.make_env(cfg.env.train_split)
    options = {**rollouts.train_options(), **cfg.sft.options}
    opt, sched = (optimizer, scheduler) if optimizer is not None else sft_optimizer(cfg, learner.model)
    best = None
    if sc.keep == "best":
        if learner.dist is not None:
            raise ConfigError("sft.keep=best keeps the best check's weights in one file, from one process; "
                              "under torchrun use sft.keep=last")
        best = BestCheck(Path(cfg.log.run_dir) / BEST_FILE, fresh=not start)
    bar = Progress(sc.steps, "warm start", cfg.log.progress)
    bar.update(start)
    stats: dict[str, Any] = {}
    reason, done = "max steps", start
    try:
        for i in range(start, sc.steps):
            t0 = time.perf_counter()
            seeds = demo_seeds(cfg, i)
            trajs = demonstrations(env, oracle if i < sc.oracle_steps else teacher, seeds, options, held)
            overlap = held.overlap(trajs, f"warm-start step {i + 1}") if held is not None else 0
            stats = sft_step(learner.model, opt, trajs, pad_id=learner.pad_id,
                             max_tokens=cfg.ppo.micro_batch_tokens,
                             max_grad_norm=sc.max_grad_norm, device=learner.device)
            sched.step()
            done = i + 1
            stats.update(lr=float(sched.get_last_lr()[0]), t_step=time.perf_counter() - t0,
                         held_out_overlap=overlap)
            if check is not None and sc.check_every and done >= sc.check_from and done % sc.check_every == 0:
                rollouts.refresh()  # a copy engine samples the check from the current weights
                found = check(done)
                stats.update({f"check_{k}": v for k, v in found.items()})
                why = stop_reason(sc, found)
                if why is not None:
                    reason = why
                elif best is not None:
                    best.offer(done, found["pass_at_1"], learner.model, opt, sched)
            log.log("sft", done, stats)
            bar.update(done, f"loss {stats['loss']:.3f} demo p {stats['demo_token_p']:.3f}"
                       + (f" check pass@1 {stats['check_pass_at_1']:.2f}" if "check_pass_at_1" in stats else ""))
            if reason != "max steps":
                break
            saved = bool(sc.checkpoint_every and done % sc.checkpoint_every == 0 and done < sc.steps)
            if checkpoint is not None and saved:
                checkpoint(done, opt, sched)
            if done < sc.steps and stop is not None and stop():
                if checkpoint is not None and not saved:
                    checkpoint(done, opt, sched)
                raise Preempted(f"stopped by SIGTERM after warm-start step {done} of {sc.steps}"
                                + (", checkpoint written" if checkpoint is not None else
                                   " (no warm-start checkpoints under torchrun: it starts over)"))
    finally:
        bar.close()
        env.close()
    if best is not None and reason == "max steps" and best.step not in (None, done):
        best.restore(learner.model, opt, sched)
        reason = (f"max steps; kept the weights of step {best.step}, the best held-out check "
                  f"(pass@1 {best.score:.3f})")
    learner.sft_optimizer = opt
    rollouts.refresh()  # gathers a sharded (torchrun) policy
    if cfg.ppo.carry_sft_optimizer:
        # PPO continues with the warm start's AdamW moments: a fresh Adam's first steps move
        # every weight by ~lr whatever its gradient (m/sqrt(v) = sign(g)), which on a tiny
        # model turns PPO's small, noisy gradients into large random steps.
        carry_moments(opt, learner.optimizer)
    return {**stats, "steps": done, "stop_reason": reason}


