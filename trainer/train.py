"""The PPO loop. Each step: collect -> score -> advantages -> update -> sync weights.

    trainer = Trainer(load_config("cpu-quickstart"))
    trainer.run()          # warm start (SFT on oracle demos), then PPO, evals, checkpoints, plots

The pieces, in the order a step calls them: :class:`~agentgym.trainer.episodes.Rollouts`
(engine, envs, one step's episodes), :func:`~agentgym.trainer.update.score`,
:func:`~agentgym.trainer.update.compute_advantages`, :func:`~agentgym.trainer.update.ppo_update`
on the :class:`~agentgym.trainer.learner.Learner` (policy, optimizer, reference, forward), and
:meth:`Rollouts.sync <agentgym.trainer.episodes.Rollouts.sync>`. Around the loop: the warm start
(``sft.py``), evaluations on held-out problems (``evaluation.py``), checkpoints (``checkpoint.py``).

The KL reference is the policy as PPO starts (after the warm start if there is one), saved
once to ``RUN_DIR/reference/``, loaded from there on ``--resume`` and never re-taken.

Everything random is derived from ``(seed, step)``: task seeds, sampling seeds, minibatch
order. So a run resumed from a checkpoint replays the remaining steps bit for bit (CPU).

Evidence (docs/controls.md): training draws from ``env.train_split`` and every evaluation runs
on the same held-out problems of ``env.eval_split`` (``rollout/heldout.py``); the warm start is saved
with its AdamW state and its evaluation (``RUN_DIR/warm_start``) so that the arms of a
comparison (``algo``, ``ppo.placebo``, ``controls``) all start from it (``sft.load``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import CheckpointError, ConfigError, Preempted

from .algo.episode import Episode
from .algo.imitation import best_of_group, successful
from .algo.ppo import AdaptiveKL, RewardNorm
from .checkpoint import check_resume_identity, clean_stray, resume_learner, save_learner
from .config import TrainConfig, config_to_dict
from .episodes import Rollouts
from .evaluation import Evaluator
from .health import KL_UNWATCHED, HealthMonitor
from .imitation import imitation_update
from .learner import Learner
from .metrics import MetricsLogger, Progress, read_metrics, truncate_metrics
from .model.files import latest_checkpoint, write_text_atomic
from .plots import write_plots
from .preempt import stop_requested
from .sft import BEST_FILE, run_sft
from .update import compute_advantages, ppo_update, score

__all__ = ["Trainer"]


class _Silent:
    """The metrics sink of ranks other than 0 (rank 0 writes the run's files)."""

    def log(self, phase: str, step: int, values: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class Trainer:
    """A run: the learner, its rollouts, the loop of :meth:`train_step` and what surrounds it."""

    def __init__(self, cfg: TrainConfig, *, resume: bool = False, engine: Any = None) -> None:
        self.cfg = cfg
        run_dir = Path(cfg.log.run_dir)
        if os.environ.get("RANK", "0") == "0" and run_dir.is_dir():
            clean_stray(run_dir)  # what a killed write left (before any rank writes anything)
        if resume and latest_checkpoint(run_dir) is None:  # said, and started over cleanly
            if os.environ.get("RANK", "0") == "0":
                print(f"agentgym-train: no checkpoint yet in {run_dir}; starting over (a new metrics.jsonl)",
                      flush=True)
            resume = False
        elif resume:
            check_resume_identity(run_dir, cfg)  # before anything is built
        self.learner = Learner(cfg)
        self.rollouts = Rollouts(cfg, self.learner, engine)
        self.ranks = self.learner.ranks
        if self.ranks.world > 1 and (cfg.algo != "ppo" or cfg.ppo.drop_uniform_groups):
            raise ConfigError(f"algo={cfg.algo} / ppo.drop_uniform_groups under torchrun is not supported: "
                              "run it in one process, or use algo=ppo without dynamic sampling")
        self.step = 0  # PPO steps completed
        self.sft_done = cfg.sft.steps == 0
        self.resumed = False
        self.reward_norm = RewardNorm() if cfg.ppo.normalize_rewards else None
        self.kl = AdaptiveKL(cfg.ppo.kl_coef, cfg.ppo.kl_target)  # the KL penalty's weight, fixed or adapted
        self.health = HealthMonitor(cfg.health)
        self.sft_resume: tuple[int, Any, Any] | None = None  # (step, optimizer, scheduler) of a killed warm start
        self.sft_summary: dict[str, Any] = {}  # the warm start's steps and stop reason (for its verdict)
        config = config_to_dict(cfg)
        self.saved_at: tuple[int, bool] | None = None  # (step, sft_done) of the last checkpoint written
        if resume:
            self._resume()
            if self.ranks.main:  # overrides given with --resume hold for every later resume too
                write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        else:
            if latest_checkpoint(run_dir) is not None:
                raise ConfigError(f"{run_dir} already holds checkpoints of a run; continue it with "
                                  f"`agentgym-train --resume {run_dir}` or pick another log.run_dir")
            if self.ranks.main:
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "metrics.jsonl").unlink(missing_ok=True)
                write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        self.ranks.barrier()
        self.log: Any = (MetricsLogger(cfg.log.run_dir, tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb,
                                       config=config) if self.ranks.main else _Silent())
        self.evaluator = Evaluator(cfg, self.learner, self.rollouts, self.log)
        if not self.resumed:
            self.log.log("held_out", 0, self.evaluator.held_out_record())
        if self.sft_done and not self.resumed:
            self.learner.start_reference(resumed=False)  # no warm start: the initial (or loaded) policy is the anchor

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, Any]:
        """One step of ``cfg.algo``: collect -> score -> advantages -> update -> sync."""
        cfg, learner, rollouts = self.cfg, self.learner, self.rollouts
        t_start = time.perf_counter()
        episodes, groups, metrics = rollouts.collect(step)
        t_rollout, t0 = time.perf_counter() - t_start, time.perf_counter()
        rollouts.sleep()
        if cfg.algo != "ppo":
            metrics.update(self._imitate(episodes, groups, step))
        elif (batch := rollouts.batch(episodes, groups, metrics)) is not None:
            batch = score(batch.to(learner.device), cfg, step, self.ranks, self.reward_norm)
            metrics.update(compute_advantages(learner, batch, cfg, step))
            if self._no_signal(batch):  # as in the imitation arms: nothing to learn, no optimizer step
                metrics["update_skipped"] = 1.0
            else:
                metrics.update(ppo_update(learner, batch, cfg, step, self.kl.coef), kl_coef=self.kl.coef)
                self.kl.update(metrics.get("kl_ref"))
        if (step + 1) % cfg.rollout.sync_every == 0:
            metrics.update(rollouts.sync(step + 1))
        t_update, t_step = time.perf_counter() - t0, time.perf_counter() - t_start
        metrics.update(t_rollout=t_rollout, t_update=t_update, t_step=t_step,
                       t_learner_busy=t_update / max(t_step, 1e-9), lr=learner.scheduler.get_last_lr()[0])
        return metrics

    def _no_signal(self, batch: Any) -> bool:
        """Every advantage is exactly 0 (no success in the step under a 0/1 score with no
        baseline, say) and no other term (KL, entropy, value head): the loss has no gradient, so
        the step takes no optimizer step, as RFT's does with no success (AdamW's momentum and
        weight decay would still move the weights). The same rule in every arm."""
        p = self.cfg.ppo
        other = ((self.learner.ref_model is not None and self.kl.coef > 0) or p.entropy_coef != 0
                 or p.advantage == "gae")
        return not other and batch.advantages is not None and not bool(
            self.ranks.sum(float(batch.advantages.abs().sum())))

    def _imitate(self, episodes: list[Episode], groups: list[int], step: int) -> dict[str, Any]:
        """The control arms' update: NLL of the policy's own successes (``rft``), of each group's
        best episode (``raft``) or of oracle demonstrations (``sft``), with PPO's optimizer and
        budget (``imitation.py``, ``algo/imitation.py``). Own episodes are scored at the temperature they were sampled at."""

        algo = self.cfg.algo
        if algo == "sft":
            return imitation_update(self.learner, self.cfg, episodes, step)
        trajs = [e.traj for e in episodes]
        picked = successful(trajs) if algo == "rft" else best_of_group(trajs, groups)
        of_traj = {id(e.traj): e for e in episodes}
        chosen = [of_traj[id(t)] for t in picked]  # in the order the selection gives
        return {f"{algo}_kept_frac": len(chosen) / max(len(episodes), 1),
                **imitation_update(self.learner, self.cfg, chosen, step, temperature=self.cfg.rollout.temperature)}

    # ------------------------------------------------------------------ driver
    def run(self) -> dict[str, Any]:
        """Warm start (unless done or loaded), then ``ppo.steps`` steps with their evaluations
        and checkpoints -> :meth:`summary`."""
        cfg, ev = self.cfg, self.evaluator
        if not self.sft_done:
            self._warm_start()
        if cfg.sft.steps and self.step == 0:  # (a resume from that checkpoint cut the file back before it)
            done = ev.evaluate("warm_start", self.step, full=True)
            ev.check_warm_start(ev.warm_start_verdict(done, steps=self.sft_summary.get("steps"),
                                                      stop_reason=self.sft_summary.get("stop_reason")))
        elif cfg.sft.load and self.step == 0 and not self.resumed:
            ev.check_warm_start(ev.load_warm_start(self.step))
        bar = Progress(cfg.ppo.steps, cfg.arm(), cfg.log.progress and self.ranks.main)
        watched = self.learner.ref_model is not None
        if cfg.algo == "ppo" and cfg.health.enabled and not watched and self.step < cfg.ppo.steps:
            bar.note(f"health: {KL_UNWATCHED}")
        try:
            while self.step < cfg.ppo.steps:
                self._stop_if_asked()
                m = self.train_step(self.step)
                self.step += 1
                alerts = self.health.check(self.step, m)
                m.update(self.health.flags(alerts), health_alerts=alerts)
                self.log.log("train", self.step, m)
                for a in alerts:
                    bar.note(f"health: {a}")
                kl = f" kl_ref {m['kl_ref']:.4f}" if "kl_ref" in m else ""
                bar.update(self.step, f"reward {m.get('reward_mean', 0.0):.3f}{kl} "
                                      f"{m['t_step']:.1f}s/step" + (f" | {alerts[0]}" if alerts else ""))
                last = self.step == cfg.ppo.steps
                if cfg.log.eval_every and (self.step % cfg.log.eval_every == 0 or last):
                    self._evaluate("ppo", full=last)
                if last or (cfg.log.checkpoint_every and self.step % cfg.log.checkpoint_every == 0):
                    self._checkpoint()
                if not last:
                    self._stop_if_asked()
        finally:
            self.rollouts.stop()
            bar.close()
            self.log.close()
        if cfg.log.plots and self.ranks.main:
            write_plots(cfg.log.run_dir)
        return self.summary()

    def _warm_start(self) -> None:
        """SFT on demonstrations (``sft.py``), stopped by its held-out check; saved, evaluated
        by :meth:`run`, and the KL reference from then on."""

        cfg, learner = self.cfg, self.learner
        start, opt, sched = self.sft_resume or (0, None, None)
        if cfg.log.eval_every and not start:
            self._evaluate("init")  # the untrained policy: where it starts
        with learner.compute():
            done = run_sft(cfg, learner, self.rollouts, self.log, held=self.rollouts.held, start=start,
                           check=self.evaluator.sft_check if cfg.sft.check_every else None,
                           optimizer=opt, scheduler=sched,
                           checkpoint=self._checkpoint_sft if learner.dist is None else None,
                           stop=lambda: stop_requested(self.ranks.world))
        self.sft_done = True
        self.sft_summary = {"steps": int(done["steps"]), "stop_reason": str(done["stop_reason"])}
        learner.save_warm_start()
        learner.start_reference(resumed=False)
        self._checkpoint()  # before the long evaluation: a kill from here on never redoes the warm start
        (Path(cfg.log.run_dir) / BEST_FILE).unlink(missing_ok=True)  # sft.keep=best's, needed no more

    def _evaluate(self, stage: str, *, full: bool = False) -> dict[str, Any]:
        """The held-out evaluation of the current policy (a stale engine is synced first)."""
        if self.rollouts.version != self.step and self.sft_done:
            self.rollouts.refresh(self.step)  # evaluate the current policy, not the engine's stale copy
        return self.evaluator.evaluate(stage, self.step, full=full)

    def summary(self) -> dict[str, Any]:
        """First and last evaluation, the latest one of each stage, and the step count."""
        rows = read_metrics(self.cfg.log.run_dir)
        evals = [r for r in rows if r["phase"] == "eval"]
        return {"eval_first": evals[0] if evals else None, "eval_last": evals[-1] if evals else None,
                "eval_stages": {r.get("stage", "ppo"): r for r in evals},
                "train_steps": sum(1 for r in rows if r["phase"] == "train"), "run_dir": self.cfg.log.run_dir}

    # ------------------------------------------------------------------ checkpoints
    def _state(self, **extra: Any) -> dict[str, Any]:
        return {"sft_done": self.sft_done, "sft_summary": self.sft_summary,
                "score_stats": self.reward_norm.state() if self.reward_norm else [0, 0.0, 0.0], "kl_coef": self.kl.coef,
                "metrics_lines": len(read_metrics(self.cfg.log.run_dir)) if self.ranks.main else 0,
                "world_size": self.ranks.world, "curriculum": self.rollouts.curriculum.state_dict(), **extra}

    def _checkpoint(self) -> None:
        save_learner(self.learner, self.step, self._state())
        self.saved_at = (self.step, self.sft_done)

    def _checkpoint_sft(self, sft_step: int, optimizer: Any, scheduler: Any) -> None:
        """A checkpoint inside the warm start: the policy with the warm start's own optimizer."""
        save_learner(self.learner, 0, self._state(sft_done=False, sft_step=sft_step), optimizer=optimizer,
                     scheduler=scheduler)

    def _stop_if_asked(self) -> None:
        """A safe point (between steps): on SIGTERM (``preempt.py``) write a checkpoint, unless
        this very state has one, and stop with :class:`Preempted`."""
        if not stop_requested(self.ranks.world):
            return
        if self.saved_at != (self.step, self.sft_done):
            self._checkpoint()
        raise Preempted(f"stopped by SIGTERM after PPO step {self.step} of {self.cfg.ppo.steps}, "
                        f"checkpoint written")

    def _resume(self) -> None:
        state, self.sft_resume = resume_learner(self.learner)
        self.resumed = True
        self.step = int(state["step"])
        self.sft_done = bool(state["sft_done"])
        self.sft_summary = dict(state.get("sft_summary", {}))
        if self.reward_norm is not None:
            self.reward_norm = RewardNorm(list(state["score_stats"]))
        self.kl.coef = float(state.get("kl_coef", self.kl.coef))
        if "curriculum" in state:
            self.rollouts.curriculum.load_state_dict(state["curriculum"])
        if self.ranks.main:
            truncate_metrics(self.cfg.log.run_dir, int(state["metrics_lines"]))
        for r in read_metrics(self.cfg.log.run_dir, "train"):  # the health series so far
            self.health.check(int(r["step"]), r)
        if self.sft_done:
            self._check_warm_start_saved()
            self.learner.start_reference(resumed=True)
        self.rollouts.refresh(self.step)
        self.saved_at = (self.step, self.sft_done)

    def _check_warm_start_saved(self) -> None:
        """A resumed run past its warm start finds ``RUN_DIR/warm_start`` complete. One cut short
        (written by a version that did not write it atomically) is written again when the
        checkpoint resumed from is the one right after the warm start (its weights, and its
        AdamW moments where PPO carries them); otherwise the arms that load it cannot start."""
        cfg, learner = self.cfg, self.learner
        problem = learner.warm_start_problem() if cfg.sft.steps else None
        if problem is None:
            return
        if self.step == 0:  # the resumed weights are the warm start's
            saved = Path(cfg.log.run_dir) / "warm_start" / "sft_optimizer.pt"
            if cfg.ppo.carry_sft_optimizer:
                learner.sft_optimizer = learner.optimizer  # holds the warm start's moments at step 0
            learner.save_warm_start(moments=saved if _readable(saved) else None)
            if (problem := learner.warm_start_problem()) is None:
                return
        if cfg.controls:
            raise CheckpointError(f"the warm start is incomplete ({problem}) and cannot be written again "
                                  f"from PPO step {self.step}; the arms {cfg.controls} start from it. Fix: "
                                  "start a new run (another log.run_dir), or resume with controls=[]")
        print(f"agentgym-train: note: the warm start is incomplete ({problem}); this run continues, but "
              "it cannot be loaded with sft.load", flush=True)

    def close(self) -> None:
        """Close the engine and the envs."""
        self.rollouts.close()


def _readable(path: Path) -> bool:
    """Whether ``path`` is a torch file that loads (a warm start's saved AdamW moments)."""
    import torch

    try:
        return isinstance(torch.load(path, map_location="cpu", weights_only=True), dict)
    except Exception:  # missing, empty, cut short: not usable, whatever the error
        return False
