"""The PPO loop. Each step: collect -> score -> advantages -> update -> sync weights.

    trainer = Trainer(load_config("cpu-quickstart"))
    trainer.run()          # warm start (SFT on oracle demos), then PPO, evals, checkpoints, plots

Exact on-policy ratio: with ``ppo.epochs == 1`` and ``ppo.minibatches == 1`` the old
log-probs are the detached log-probs of the very forward pass that is differentiated, so the
ratio is exactly 1 and nothing is clipped; otherwise a no-grad pass before the update gives
them. The engine's (behaviour) log-probs enter only through rollout correction.

Everything random is derived from ``(seed, step)``: task seeds, sampling seeds, minibatch
order. So a run resumed from a checkpoint replays the remaining steps bit for bit (CPU).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agentgym.errors import ConfigError, NonFiniteError
from agentgym.trainer.batch import Batch, make_batch, prefix_forward
from agentgym.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_model
from agentgym.trainer.config import TrainConfig
from agentgym.trainer.correction import correction_weights, mismatch_stats
from agentgym.trainer.logprobs import ForwardOut
from agentgym.trainer.metrics import MetricsLogger, Progress, episode_stats, read_metrics, truncate_metrics
from agentgym.trainer.ppo import gae, group_advantages, kl_estimate, masked_mean, ppo_policy_loss, value_loss
from agentgym.trainer.ray_rollout import drop_failed
from agentgym.trainer.rollout import Collector, group_seeds

__all__ = ["Setup", "Trainer", "build_setup", "check_finite"]

TRAIN_SEED_BASE = 1_000_000  # task seeds of PPO step s: TRAIN_SEED_BASE + s * tasks_per_step + i
EVAL_SEED_BASE = 0  # eval tasks: seeds 0..eval_episodes-1 of the eval split, every time


def check_finite(name: str, x: torch.Tensor, step: int, hint: str) -> None:
    """Raise :class:`NonFiniteError` if ``x`` holds NaN or inf (before anything is written)."""
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NonFiniteError(f"step {step}: {bad} non-finite value(s) in {name}; expected finite "
                             f"numbers. {hint} No checkpoint was written for this step.")


class Setup:
    """Everything a run holds: tokenizer, policy (+ value head, reference), optimizer, engine, envs."""

    def __init__(self, cfg: TrainConfig, engine: Any = None) -> None:
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the environments)
        from agentgym.tokenizers import as_tokenizer
        from agentgym.trainer.engines.base import make_engine
        from agentgym.trainer.model import ValueHead, build_tiny_for, is_tiny, load_policy, tiny_tokenizer

        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.device = torch.device(cfg.model.device)
        dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
        if is_tiny(cfg.model.name):  # tiny (byte tokenizer) or tiny:o200k_harmony (GPT-OSS's)
            self.tokenizer: Any = tiny_tokenizer(cfg.model.name)
            self.model = build_tiny_for(self.tokenizer, seed=cfg.seed, **cfg.model.tiny)
            self.model.to(device=self.device, dtype=dtype)
        else:
            self.tokenizer = as_tokenizer(cfg.model.name)
            self.model = load_policy(cfg.model.name, device=self.device, dtype=dtype,
                                     attn_implementation=cfg.model.attn_implementation)
        if cfg.model.init_from:
            load_weights(self.model, cfg.model.init_from)
        self.pad_id = int(getattr(self.tokenizer, "pad_id", None) or self.model.config.pad_token_id or 0)
        self.model.train()
        self.value_head = (ValueHead(self.model.config.hidden_size).to(self.device)
                           if cfg.ppo.advantage == "gae" else None)
        self.params = list(self.model.parameters()) + (
            list(self.value_head.parameters()) if self.value_head is not None else [])
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.ppo.lr, weight_decay=cfg.ppo.weight_decay)
        warm = max(cfg.ppo.warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda i: min(1.0, (i + 1) / warm))
        self.ref_model: torch.nn.Module | None = None
        if engine is None:
            kw = dict(cfg.rollout.engine_kwargs)
            if cfg.rollout.engine in ("hf", "vllm"):  # vllm starts from a checkpoint of this model
                kw.setdefault("model", self.model)
            if cfg.rollout.engine == "hf":
                kw.setdefault("pad_id", self.pad_id)
            if cfg.rollout.engine == "hf" and cfg.rollout.prefix_cache:
                from agentgym.trainer.rollout import make_prefix_engine

                engine = make_prefix_engine(**kw)
            else:
                engine = make_engine(cfg.rollout.engine, **kw)
        self.engine = engine
        self.engine.sync_weights(self.model)

        tokenizer = self.tokenizer  # captured alone, so make_env pickles for Ray workers

        def make_env() -> Any:
            return gym.make(cfg.env.id, tokenizer=tokenizer, reward_mode=cfg.env.reward_mode,
                            max_turns=cfg.env.max_turns, max_tokens=cfg.env.max_tokens,
                            max_action_tokens=cfg.env.max_action_tokens, prompt=cfg.env.prompt,
                            **cfg.env.kwargs)

        self.make_env = make_env
        d = cfg.derived()
        self.collector: Any
        self.eval_collector: Any
        if cfg.rollout.backend == "ray":  # rollout workers as Ray actors (ray_rollout.py)
            from agentgym.trainer.ray_rollout import RayCollector

            self.collector = self.eval_collector = RayCollector.from_config(cfg, make_env, self.model, self.pad_id)
        else:
            self.collector = Collector.from_factory(make_env, d["episodes_per_step"], engine,
                                                    max_new_tokens=cfg.env.max_action_tokens,
                                                    max_workers=cfg.rollout.max_workers)
            self.eval_collector = Collector.from_factory(make_env, cfg.log.eval_episodes, engine,
                                                         max_new_tokens=cfg.env.max_action_tokens,
                                                         max_workers=cfg.rollout.max_workers)
        from agentgym.trainer.config import config_to_dict

        self.config_dict = config_to_dict(cfg)

    def after_warm_start(self) -> None:
        """Freeze the warm-started weights: saved once (the KL reference, shared starts)."""
        from pathlib import Path

        warm = Path(self.cfg.log.run_dir) / "warm_start"
        if not (warm / "config.json").exists():
            save_model(self.model, warm)
        if self.cfg.ppo.kl_coef > 0:
            import copy

            self.ref_model = copy.deepcopy(self.model).eval()
            load_weights(self.ref_model, str(warm))
            self.ref_model.requires_grad_(False)

    def close(self) -> None:
        self.collector.close()
        self.eval_collector.close()
        self.engine.close()


def build_setup(cfg: TrainConfig, engine: Any = None) -> Setup:
    return Setup(cfg, engine)


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Load safetensors weights from a run dir (its latest checkpoint), a checkpoint or a model dir."""
    from pathlib import Path

    from safetensors.torch import load_file

    from agentgym.errors import CheckpointError

    p = Path(path)
    ckpt = latest_checkpoint(p)
    for cand in ([ckpt / "model"] if ckpt else []) + [p / "model", p]:
        f = cand / "model.safetensors"
        if f.exists():
            model.load_state_dict(load_file(str(f)), strict=False)
            return
    raise CheckpointError(f"no model.safetensors under {path!r}; expected a run dir, a checkpoint "
                          "dir or a model dir written by agentgym-train")


class Trainer:
    def __init__(self, cfg: TrainConfig, *, resume: bool = False, engine: Any = None) -> None:
        self.cfg = cfg
        self.s: Setup = build_setup(cfg, engine=engine)
        self.step = 0  # PPO steps completed
        self.sft_done = cfg.sft.steps == 0
        self.score_stats = [0, 0.0, 0.0]  # running count, mean, M2 of scores (reward norm)
        run_dir = Path(cfg.log.run_dir)
        if resume:
            self._resume()
        else:
            if latest_checkpoint(run_dir) is not None:
                raise ConfigError(f"{run_dir} already holds checkpoints of a run; continue it with "
                                  f"`agentgym-train --resume {run_dir}` or pick another log.run_dir")
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)
            (run_dir / "config.yaml").write_text(yaml.safe_dump(self.s.config_dict, sort_keys=False))
        self.log = MetricsLogger(cfg.log.run_dir, tensorboard=cfg.log.tensorboard,
                                 wandb=cfg.log.wandb, config=self.s.config_dict)

    # ------------------------------------------------------------------ driver
    def run(self) -> dict[str, Any]:
        cfg, s = self.cfg, self.s
        if not self.sft_done:
            from agentgym.trainer.sft import run_sft

            if cfg.log.eval_every:
                self._evaluate("init")  # the untrained policy: where the run's reward starts
            run_sft(cfg, s, self.log)
            self.sft_done = True
            s.after_warm_start()
            self._evaluate("warm_start")
            self._checkpoint()
        bar = Progress(cfg.ppo.steps, "ppo", cfg.log.progress)
        try:
            while self.step < cfg.ppo.steps:
                m = self.train_step(self.step)
                self.step += 1
                self.log.log("train", self.step, m)
                bar.update(self.step, f"reward {m['reward_mean']:.3f} kl_ref {m.get('kl_ref', 0):.4f} "
                                      f"{m['t_step']:.1f}s/step")
                last = self.step == cfg.ppo.steps
                if cfg.log.eval_every and (self.step % cfg.log.eval_every == 0 or last):
                    self._evaluate("ppo")
                if last or (cfg.log.checkpoint_every and self.step % cfg.log.checkpoint_every == 0):
                    self._checkpoint()
        finally:
            bar.close()
            self.log.close()
        if cfg.log.plots:
            from agentgym.trainer.plots import write_plots

            write_plots(cfg.log.run_dir)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """First and last evaluation, the latest one of each stage, and the step count."""
        rows = read_metrics(self.cfg.log.run_dir)
        evals = [r for r in rows if r["phase"] == "eval"]
        train = [r for r in rows if r["phase"] == "train"]
        return {"eval_first": evals[0] if evals else None, "eval_last": evals[-1] if evals else None,
                "eval_stages": {r.get("stage", "ppo"): r for r in evals},
                "train_steps": len(train), "run_dir": self.cfg.log.run_dir}

    # ------------------------------------------------------------------ one PPO step
    def train_step(self, step: int) -> dict[str, Any]:
        cfg, s = self.cfg, self.s
        t_start = time.perf_counter()
        tasks, k = cfg.rollout.tasks_per_step, cfg.rollout.samples_per_task
        seeds, groups = group_seeds(TRAIN_SEED_BASE + step * tasks, tasks, k)
        trajs, rstats = s.collector.collect(seeds, temperature=cfg.rollout.temperature,
                                            sample_seed=cfg.seed * 7919 + step * 131,
                                            options=cfg.env.train_options)
        trajs, groups, failed = drop_failed(trajs, groups)  # episodes lost with a Ray worker
        if cfg.log.save_trajectories:
            from agentgym.trajectory import write_jsonl

            write_jsonl(f"{cfg.log.run_dir}/trajectories.jsonl", trajs, append=True)
        batch = make_batch(trajs, groups, pad_id=s.pad_id).to(s.device)
        t_rollout = time.perf_counter() - t_start
        metrics: dict[str, Any] = episode_stats(trajs)
        metrics.update(gen_s=rstats.gen_seconds, env_s=rstats.env_seconds, episodes_failed=failed)

        # Old log-probs: from the differentiated pass itself when exactly on-policy.
        exact = cfg.ppo.epochs == 1 and cfg.ppo.minibatches == 1
        first = self._forward(batch, grad=exact)
        old_logp = first.logprobs.detach()  # (B, T)
        old_values = first.values.detach() if first.values is not None else None
        mask = batch.policy_mask

        rewards, scores = batch.rewards.clone(), batch.scores.clone()
        ref_logp = self._ref_logp(batch)
        if ref_logp is not None and cfg.ppo.kl_in == "reward":
            kl_tok = kl_estimate(old_logp, ref_logp, "k1") * mask  # (B, T)
            rewards -= cfg.ppo.kl_coef * kl_tok
            scores -= cfg.ppo.kl_coef * kl_tok.sum(-1)
        if cfg.ppo.normalize_rewards:
            std = self._update_score_stats(batch.scores)
            rewards, scores = rewards / std, scores / std
        check_finite("rewards", scores, step, "Check the environment's rewards and shaping.")
        adv, returns = self._advantages(batch, rewards, scores, old_values)
        check_finite("advantages", adv, step, "Check rewards and the value head.")
        weights = correction_weights(old_logp, batch.behaviour_logp, mask, mode=cfg.correction.mode,
                                     threshold=cfg.correction.threshold, lo=cfg.correction.lo,
                                     hi=cfg.correction.hi, geo_band=tuple(cfg.correction.geo_band))
        metrics.update({f"mismatch_{k}": v for k, v in mismatch_stats(
            old_logp, batch.behaviour_logp, mask, weights, threshold=cfg.correction.threshold).items()})

        t0 = time.perf_counter()
        upd = self._update(batch, first if exact else None, old_logp, old_values, adv, returns,
                           weights, ref_logp, step)
        metrics.update(upd)
        s.engine.sync_weights(s.model)
        metrics.update(t_rollout=t_rollout, t_update=time.perf_counter() - t0,
                       t_step=time.perf_counter() - t_start, lr=s.scheduler.get_last_lr()[0])
        return metrics

    def _forward(self, b: Batch, *, grad: bool) -> ForwardOut:
        with torch.set_grad_enabled(grad):
            return prefix_forward(self.s.model, b, temperature=self.cfg.rollout.temperature,
                                  value_head=self.s.value_head, with_entropy=grad)

    @torch.no_grad()
    def _ref_logp(self, b: Batch) -> torch.Tensor | None:
        if self.s.ref_model is None:
            return None
        return prefix_forward(self.s.ref_model, b, temperature=self.cfg.rollout.temperature,
                              with_entropy=False).logprobs

    def _advantages(self, b: Batch, rewards: torch.Tensor, scores: torch.Tensor,
                    old_values: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        p = self.cfg.ppo
        if p.advantage == "group":
            seq_adv = group_advantages(scores, b.group_ids, normalize_std=p.group_std_normalize)
            return seq_adv[:, None] * b.policy_mask, None  # (B, T): one advantage per episode
        assert old_values is not None
        # values[:, L] (the first pad column) is V of the state after the last token.
        last = old_values.gather(1, b.lengths[:, None]).squeeze(1)  # (B,)
        bootstrap = torch.where(b.truncated, last, torch.zeros_like(last))
        return gae(rewards, old_values, b.policy_mask, gamma=p.gamma, lam=p.lam, bootstrap=bootstrap)

    def _update(self, b: Batch, first: ForwardOut | None, old_logp: torch.Tensor,
                old_values: torch.Tensor | None, adv: torch.Tensor, returns: torch.Tensor | None,
                weights: torch.Tensor, ref_logp: torch.Tensor | None, step: int) -> dict[str, float]:
        p, s = self.cfg.ppo, self.s
        gen = torch.Generator().manual_seed(self.cfg.seed * 104729 + step)
        acc: dict[str, list[float]] = {}
        for _epoch in range(p.epochs):
            order = torch.randperm(len(b), generator=gen) if p.minibatches > 1 else torch.arange(len(b))
            for rows in order.chunk(p.minibatches):
                sub = b if p.minibatches == 1 else b.select(rows)
                width = sub.input_ids.shape[1]

                def pick(x: torch.Tensor, rows: torch.Tensor = rows, width: int = width) -> torch.Tensor:
                    return x if p.minibatches == 1 else x[rows, :width]

                out = first if first is not None else self._forward(sub, grad=True)
                first = None  # only the very first minibatch of the first epoch reuses it
                m = sub.policy_mask
                pg, st = ppo_policy_loss(out.logprobs, pick(old_logp), pick(adv), m,
                                         clip_low=p.clip_low, clip_high=p.clip_high, weights=pick(weights))
                loss = pg
                ent = masked_mean(out.entropy, m)
                st.update(pg_loss=pg.item(), entropy=ent.item())
                if p.entropy_coef:
                    loss = loss - p.entropy_coef * ent
                if out.values is not None and returns is not None and old_values is not None:
                    vl = value_loss(out.values, pick(old_values), pick(returns), m, clip=p.value_clip)
                    loss = loss + p.value_coef * vl
                    st["value_loss"] = vl.item()
                if ref_logp is not None:
                    kl = masked_mean(kl_estimate(out.logprobs, pick(ref_logp), p.kl_estimator), m)
                    st["kl_ref"] = kl.item()
                    if p.kl_in == "loss":
                        loss = loss + p.kl_coef * kl
                check_finite("loss", loss.detach(), step, "Lower ppo.lr, check rewards, or enable "
                             "rollout correction (correction.mode).")
                s.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(s.params, p.max_grad_norm or math.inf)
                check_finite("grad norm", gn.detach(), step, "Lower ppo.lr or ppo.max_grad_norm.")
                s.optimizer.step()
                s.scheduler.step()
                st.update(loss=loss.item(), grad_norm=gn.item())
                for key, v in st.items():
                    acc.setdefault(key, []).append(float(v))
        out_stats = {k: sum(v) / len(v) for k, v in acc.items()}
        for key in ("ratio_min", "clip_frac"):
            if key in acc:
                out_stats[f"{key}_first"] = acc[key][0]
        if "ratio_max" in acc:
            out_stats["ratio_max"] = max(acc["ratio_max"])
            out_stats["ratio_max_first"] = acc["ratio_max"][0]
            out_stats["ratio_min"] = min(acc["ratio_min"])
        return out_stats

    def _update_score_stats(self, scores: torch.Tensor) -> float:
        n, mean, m2 = self.score_stats  # Welford over every score seen so far
        for x in scores.tolist():
            n += 1
            d = x - mean
            mean += d / n
            m2 += d * (x - mean)
        self.score_stats = [n, mean, m2]
        return max(math.sqrt(m2 / max(n - 1, 1)), 1e-3)

    # ------------------------------------------------------------------ eval / checkpoints
    def _evaluate(self, stage: str) -> dict[str, Any]:
        """``log.eval_episodes`` fixed tasks at ``log.eval_temperature``; ``stage`` is ``init``
        (before the warm start), ``warm_start`` (right after it) or ``ppo``."""
        cfg, s = self.cfg, self.s
        seeds = [EVAL_SEED_BASE + i for i in range(cfg.log.eval_episodes)]
        trajs, _ = s.eval_collector.collect(seeds, temperature=cfg.log.eval_temperature,
                                            sample_seed=12345, options=cfg.env.eval_options)
        trajs, _, _ = drop_failed(trajs, seeds)
        m = episode_stats(trajs)
        self.log.log("eval", self.step, {"stage": stage, **m})
        return m

    def _checkpoint(self) -> None:
        cfg, s = self.cfg, self.s
        state = {"sft_done": self.sft_done, "score_stats": self.score_stats,
                 "metrics_lines": len(read_metrics(cfg.log.run_dir))}
        save_checkpoint(cfg.log.run_dir, self.step, model=s.model, optimizer=s.optimizer,
                        scheduler=s.scheduler, value_head=s.value_head, state=state,
                        keep=cfg.log.keep_checkpoints)

    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.cfg.log.run_dir)
        if ckpt is None:
            return  # nothing saved yet: start over (the metrics file is reset by build_setup)
        s = self.s
        state = load_checkpoint(ckpt, model=s.model, optimizer=s.optimizer, scheduler=s.scheduler,
                                value_head=s.value_head)
        self.step = int(state["step"])
        self.sft_done = bool(state["sft_done"])
        self.score_stats = list(state["score_stats"])
        # The optimizer state brings back the saved lr and weight decay; the config decides
        # (a resume may change ppo.lr on purpose). Unchanged values give the same floats.
        lr = self.cfg.ppo.lr
        s.scheduler.base_lrs = [lr] * len(s.optimizer.param_groups)
        for g, factor in zip(s.optimizer.param_groups, s.scheduler.lr_lambdas, strict=True):
            g["initial_lr"], g["weight_decay"] = lr, self.cfg.ppo.weight_decay
            g["lr"] = lr * factor(s.scheduler.last_epoch)
        truncate_metrics(self.cfg.log.run_dir, int(state["metrics_lines"]))
        if self.sft_done:
            s.after_warm_start()
        s.engine.sync_weights(s.model)
