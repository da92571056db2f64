"""The PPO loop. Each step: collect -> score -> advantages -> update -> sync weights.

    trainer = Trainer(load_config("cpu-quickstart"))
    trainer.run()          # warm start (SFT on oracle demos), then PPO, evals, checkpoints, plots

The update itself (micro-batches, exact on-policy ratio, correction, losses) is
:func:`agentgym.trainer.update.ppo_update`. Precision: parameters, gradients and AdamW state
are float32 (master weights); ``model.dtype: bfloat16`` computes in bfloat16 (autocast in one
process, FSDP2 mixed precision under torchrun, see ``distributed.py``).

The KL reference is the policy as PPO starts (after the warm start if there is one), saved
once to ``RUN_DIR/reference/``, loaded from there on ``--resume`` and never re-taken.

Everything random is derived from ``(seed, step)``: task seeds, sampling seeds, minibatch
order. So a run resumed from a checkpoint replays the remaining steps bit for bit (CPU).

Evidence (docs/controls.md): training draws from ``env.train_split`` and every evaluation runs
on the same held-out problems of ``env.eval_split`` (``heldout.py``); the warm start is saved
with its AdamW state and its evaluation (``RUN_DIR/warm_start``) so that the arms of a
comparison (``algo``, ``ppo.placebo``, ``controls``) all start from it (``sft.load``); an engine
with its own weights (``rollout.engine_weights=copy``, vLLM, a server) is synced every
``rollout.sync_every`` steps, and every training episode records the policy version that
sampled it (``meta["policy_version"]``; per token: ``meta["token_versions"]``). With
``rollout.mode: async`` a producer thread collects the next steps while the learner updates, at
most ``rollout.max_staleness`` policy versions behind (``async_rollout.py``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agentgym.errors import CheckpointError, ConfigError, WarmStartFailed
from agentgym.trainer import distributed as D
from agentgym.trainer.batch import make_batch
from agentgym.trainer.checkpoint import (
    check_resume_identity,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_model,
)
from agentgym.trainer.config import TrainConfig
from agentgym.trainer.curriculum import CurriculumSampler
from agentgym.trainer.evaluation import ARM_NAMES, STAGE_NAMES, collect_fixed, eval_record
from agentgym.trainer.health import HealthMonitor
from agentgym.trainer.heldout import HeldOut
from agentgym.trainer.metrics import (
    MetricsLogger,
    Progress,
    episode_stats,
    episode_success,
    read_metrics,
    truncate_metrics,
)
from agentgym.trainer.ray_rollout import drop_failed
from agentgym.trainer.rollout import Collector, drop_infra, group_seeds
from agentgym.trainer.update import check_finite, ppo_update

__all__ = ["Setup", "Trainer", "build_setup", "check_finite", "load_weights"]

TRAIN_SEED_BASE = 1_000_000  # task seeds of PPO step s: TRAIN_SEED_BASE + s * tasks_per_step + i
EVAL_SEED_BASE = 0  # eval problems: the first distinct ones from seed 0 up of the eval split
SFT_ARM_SEED_BASE = 2_000_000  # algo=sft: step s demonstrates seeds SFT_ARM_SEED_BASE + s * episodes + i
REFERENCE = "reference"  # RUN_DIR/reference: the KL anchor, saved once
WARM_START = "warm_start"  # RUN_DIR/warm_start: weights, SFT AdamW state, warm_start.json


class Setup:
    """Everything a run holds: tokenizer, policy (+ value head, reference), optimizer, engine, envs."""

    def __init__(self, cfg: TrainConfig, engine: Any = None) -> None:
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the environments)
        from agentgym.trainer.model import ValueHead

        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        dc = cfg.distributed
        self.dist = D.init_distributed(backend=dc.backend, device=cfg.model.device, rollout_tp=dc.rollout_tp)
        if self.dist is not None and dc.nproc and dc.nproc != self.dist.world:
            raise ConfigError(f"distributed.nproc={dc.nproc} but torchrun started {self.dist.world} "
                              f"processes; run torchrun --nproc_per_node {dc.nproc} or set distributed.nproc")
        self.device = self.dist.device if self.dist is not None else torch.device(cfg.model.device)
        self.compute_dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
        self.model: Any
        self.tokenizer, self.model = self._build_policy()
        self.pad_id = int(getattr(self.tokenizer, "pad_id", None) or self.model.config.pad_token_id or 0)
        self.value_head = (ValueHead(self.model.config.hidden_size).to(self.device)
                           if cfg.ppo.advantage == "gae" else None)
        if self.dist is not None:
            D.shard_policy(self.model, compute_dtype=self.compute_dtype,
                           reshard_after_forward=dc.reshard_after_forward)
            D.materialize(self.model, self.device)
            self._load_initial_weights()
            if self.value_head is not None:
                D.shard_module(self.value_head, compute_dtype=self.compute_dtype)
        elif cfg.model.init_from or cfg.sft.load:
            load_weights(self.model, cfg.sft.load or cfg.model.init_from)
        self.model.train()
        self.params = list(self.model.parameters()) + (
            list(self.value_head.parameters()) if self.value_head is not None else [])
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.ppo.lr, weight_decay=cfg.ppo.weight_decay)
        warm = max(cfg.ppo.warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda i: min(1.0, (i + 1) / warm))
        self.sft_optimizer: torch.optim.Optimizer | None = None  # the warm start's (run_sft sets it)
        if cfg.sft.load and cfg.ppo.carry_sft_optimizer:
            from agentgym.trainer.sft import load_moments

            if self.dist is not None:
                raise ConfigError("sft.load with ppo.carry_sft_optimizer=true under torchrun is not "
                                  "supported; set ppo.carry_sft_optimizer=false")
            load_moments(Path(cfg.sft.load) / "sft_optimizer.pt", self.model, self.optimizer)
        self.ref_model: torch.nn.Module | None = None
        self._engine_synced = False  # True when the engine was just filled with these weights
        if engine is None:
            engine = self._make_engine(self._engine_model())
        if cfg.rollout.sleep_level and not (hasattr(engine, "sleep") and hasattr(engine, "wake_up")):
            raise ConfigError(f"rollout.sleep_level={cfg.rollout.sleep_level}: the {cfg.rollout.engine} "
                              "engine cannot sleep (no sleep/wake_up); set rollout.sleep_level=0")
        if self.dist is not None and dc.rollout_tp > 1:  # envs on the group's first rank (tp_rollout.py)
            from agentgym.trainer.tp_rollout import GroupEngine

            engine = GroupEngine(engine, self.dist, mirror=bool(getattr(engine, "in_process", False)))
        if cfg.rollout.mode == "async":  # every sample says which weights made it (async_rollout.py)
            from agentgym.trainer.async_rollout import VersionedEngine

            if self.dist is not None:
                raise ConfigError("rollout.mode=async under torchrun is not supported: expected one process; "
                                  "fix: run without torchrun, or rollout.mode=sync")
            engine = VersionedEngine(engine)
        self.engine = engine
        self.engine_asleep = False
        if not self._engine_synced:
            self.sync_engine()

        tokenizer = self.tokenizer  # captured alone, so make_env pickles for Ray workers
        env_cfg = cfg.env

        def make_env(split: str | None = env_cfg.train_split) -> Any:
            """An env of ``split`` (given as the constructor argument; null: the env's own)."""
            extra: dict[str, Any] = {"split": split} if split is not None else {}
            return gym.make(env_cfg.id, tokenizer=tokenizer, reward_mode=env_cfg.reward_mode,
                            max_turns=env_cfg.max_turns, max_tokens=env_cfg.max_tokens,
                            max_action_tokens=env_cfg.max_action_tokens, prompt=env_cfg.prompt,
                            **env_cfg.kwargs, **extra)

        def make_eval_env() -> Any:
            return make_env(env_cfg.eval_split)

        self.make_env = make_env
        self.collector: Any
        self.eval_collector: Any
        if cfg.rollout.backend == "ray":  # rollout workers as Ray actors (ray_rollout.py)
            from agentgym.trainer.ray_rollout import RayCollector

            if self.dist is not None:
                raise ConfigError("rollout.backend=ray under torchrun is not supported: each rank "
                                  "collects with its own engine; use rollout.backend=local")
            # one pool of train-split envs; evaluation passes split=eval as a reset option
            self.collector = self.eval_collector = RayCollector.from_config(cfg, make_env, self.model, self.pad_id)
        else:
            groups = self.dist.groups if self.dist is not None else 1  # this rank's engine's share
            n_train = cfg.derived()["episodes_per_step"] // groups

            def collector(factory: Any, n: int) -> Any:
                from agentgym.trainer.tp_rollout import GroupCollector, GroupEngine

                if not isinstance(self.engine, GroupEngine):
                    return Collector.from_factory(factory, n, self.engine, max_new_tokens=cfg.env.max_action_tokens,
                                                  max_workers=cfg.rollout.max_workers)
                inner = Collector.from_factory(factory, n, self.engine, max_new_tokens=cfg.env.max_action_tokens,
                                               max_workers=cfg.rollout.max_workers) if self.engine.is_leader else None
                return GroupCollector(inner, self.engine, n)

            self.collector = collector(make_env, n_train)
            self.eval_collector = collector(make_eval_env, cfg.log.eval_episodes)
        from agentgym.trainer.config import config_to_dict

        self.config_dict = config_to_dict(cfg)

    def train_options(self) -> dict[str, Any]:
        """Reset options of training episodes: ``env.train_options`` plus the split."""
        e = self.cfg.env
        return {**e.train_options, **({"split": e.train_split} if e.train_split is not None else {})}

    def eval_options(self) -> dict[str, Any]:
        """Reset options of evaluation episodes: ``env.eval_options`` plus the split."""
        e = self.cfg.env
        return {**e.eval_options, **({"split": e.eval_split} if e.eval_split is not None else {})}

    # ------------------------------------------------------------------ building
    def _build_policy(self, *, meta: bool | None = None) -> tuple[Any, torch.nn.Module]:
        """(tokenizer, policy) in float32. Under torchrun the policy is built on the meta device
        (no memory; weights arrive after sharding, :meth:`_load_initial_weights`)."""
        from agentgym.trainer.attention import set_attention
        from agentgym.trainer.model import (
            build_tiny_for,
            build_tiny_gptoss,
            is_tiny,
            load_policy,
            resolve_attention,
            resolve_tokenizer,
        )

        m = self.cfg.model
        meta = self.dist is not None if meta is None else meta
        tok: Any = resolve_tokenizer(m.name, m.tokenizer)
        if meta:
            model = D.policy_skeleton(m.name, tok.vocab_size, m.tiny, attn_implementation=m.attn_implementation,
                                      device=self.device)
        elif is_tiny(m.name):  # tiny: the byte tokenizer; tiny:TOKENIZER: sized for it (vocabulary, pad id)
            model = (build_tiny_gptoss(tok.vocab_size, seed=self.cfg.seed, **m.tiny) if m.name == "tiny"
                     else build_tiny_for(tok, seed=self.cfg.seed, **m.tiny)).to(self.device)
            set_attention(model, resolve_attention(m.attn_implementation, self.device, model.config.head_dim))
        else:
            model = load_policy(m.name, device=self.device, dtype=torch.float32,
                                attn_implementation=m.attn_implementation)
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return tok, model

    def _load_initial_weights(self) -> None:
        """Sharded policy: rank 0 reads the initial weights (``init_from``, else the tiny seed or
        ``model.name``), every rank receives its shards."""
        if self.cfg.model.init_from or self.cfg.sft.load:
            load_weights(self.model, self.cfg.sft.load or self.cfg.model.init_from)
            return
        full = self._build_policy(meta=False)[1].state_dict() if self.dist is not None and self.dist.is_main else {}
        D.load_full_state(self.model, full)

    def _engine_model(self) -> torch.nn.Module:
        """What an in-process engine samples from: the learner's module (``engine_weights:
        shared``), or its own copy in ``rollout.engine_dtype``, filled by :meth:`sync_engine`."""
        r = self.cfg.rollout
        if self.dist is not None:
            return self._engine_copy()
        if r.engine == "hf" and r.engine_weights == "copy":
            dtype = self.compute_dtype if r.engine_dtype == "auto" else getattr(torch, r.engine_dtype)
            return copy.deepcopy(self.model).to(dtype).requires_grad_(False)
        return self.model

    def _engine_copy(self) -> torch.nn.Module:
        """An unsharded policy for this rank's in-process engine, filled by :meth:`sync_engine`."""
        if self.cfg.rollout.engine != "hf":
            return self.model
        engine_model = D.materialize(self._build_policy(meta=True)[1], self.device)
        return engine_model.to(self.compute_dtype)

    def _make_engine(self, model: torch.nn.Module) -> Any:
        from agentgym.trainer.engines.base import make_engine

        cfg = self.cfg
        kw = dict(cfg.rollout.engine_kwargs)
        if cfg.rollout.engine == "hf":
            kw.setdefault("model", model)
            kw.setdefault("pad_id", self.pad_id)
            if cfg.rollout.prefix_cache:
                from agentgym.trainer.rollout import make_prefix_engine

                return make_prefix_engine(**kw)
        if cfg.rollout.engine == "vllm":
            from agentgym.trainer.plan import check_engine_checkpoint

            if self.dist is not None:  # inside this torchrun job, one engine per rollout group
                kw.setdefault("distributed_executor_backend", "external_launcher")
                kw.setdefault("tensor_parallel_size", cfg.distributed.rollout_tp)
                kw.setdefault("seed", cfg.seed)  # the ranks of one engine must sample alike
            if "model" in kw:
                check_engine_checkpoint(str(kw["model"]))
            else:  # built from our config, filled from our weights in memory: names and dtypes match
                kw["model"] = D.GatheredWeights(self.model, self.compute_dtype) if self.dist is not None else model
                self._engine_synced = True
        return make_engine(cfg.rollout.engine, **kw)

    def engine_sleep(self) -> None:
        """Free the engine's GPU memory for the update (``rollout.sleep_level``)."""
        if self.cfg.rollout.sleep_level:
            self.engine.sleep(level=self.cfg.rollout.sleep_level)
            self.engine_asleep = True

    def sync_engine(self, version: int | None = None) -> None:
        """Free the gradients (the update is over), wake the engine if it sleeps, then push the
        current weights (in the compute dtype). ``rollout.mode: async``: they are policy
        ``version`` (the updates done), which the samples made from them record; Ray workers
        load them at their next unit."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.engine_asleep:
            self.engine.wake_up()
            self.engine_asleep = False
        if self.cfg.rollout.mode == "async":
            self.engine.sync_weights(self.model, version=version)
            if self.cfg.rollout.backend == "ray" and version is not None:
                self.collector.sync_weights(self.model, version=version)
        elif self.dist is None:
            self.engine.sync_weights(self.model)
        else:
            self.engine.sync_weights(D.GatheredWeights(self.model, self.compute_dtype))

    def compute(self) -> contextlib.AbstractContextManager[Any]:
        """Where forward passes run: bfloat16 autocast for a single-process bf16 run (FSDP2
        casts by itself under torchrun), nothing otherwise."""
        if self.compute_dtype == torch.float32 or self.dist is not None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    # ------------------------------------------------------------------ the KL reference
    def start_reference(self, *, resumed: bool) -> None:
        """Save the policy as PPO starts to ``RUN_DIR/reference`` (unless resuming), and load
        the frozen reference from there when ``ppo.kl_coef > 0``. Never re-taken on resume."""
        ref_dir = Path(self.cfg.log.run_dir) / REFERENCE
        if not resumed:
            save_model(self.model, ref_dir, dtype=self.compute_dtype)
        elif not (ref_dir / "model.safetensors").exists():
            if self.cfg.ppo.kl_coef > 0:
                raise CheckpointError(f"{ref_dir} is missing: the KL reference (the policy when PPO "
                                      "started) is saved once per run and never re-taken from resumed "
                                      "weights. Restore it, or resume with ppo.kl_coef=0")
            return
        if self.cfg.ppo.kl_coef <= 0 or self.cfg.algo != "ppo":
            return
        if self.dist is None:
            ref = copy.deepcopy(self.model).to(self.compute_dtype)
        else:
            ref = self._build_policy(meta=True)[1].to(self.compute_dtype)
            D.shard_policy(ref, compute_dtype=self.compute_dtype, mixed_precision=False,
                           reshard_after_forward=self.cfg.distributed.reshard_after_forward)
            D.materialize(ref, self.device)
        load_weights(ref, ref_dir)
        ref.eval().requires_grad_(False)
        self.ref_model = ref

    def after_warm_start(self) -> None:
        """Save the warm start once (``RUN_DIR/warm_start``: weights, and the warm start's AdamW
        moments in ``sft_optimizer.pt``): the common starting point of the arms of a comparison
        (``sft.load``) and of benches such as bench/trl_grpo_bench.py."""
        warm = Path(self.cfg.log.run_dir) / WARM_START
        if not (warm / "config.json").exists():
            save_model(self.model, warm)
            if self.sft_optimizer is not None and self.dist is None:
                from agentgym.trainer.sft import save_moments

                save_moments(self.sft_optimizer, self.model, warm / "sft_optimizer.pt")

    def close(self) -> None:
        self.collector.close()
        self.eval_collector.close()
        self.engine.close()


def build_setup(cfg: TrainConfig, engine: Any = None) -> Setup:
    return Setup(cfg, engine)


class _Silent:
    """The metrics sink of ranks other than 0 (rank 0 writes the run's files)."""

    def log(self, phase: str, step: int, values: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class Trainer:
    def __init__(self, cfg: TrainConfig, *, resume: bool = False, engine: Any = None) -> None:
        self.cfg = cfg
        run_dir = Path(cfg.log.run_dir)
        if resume and latest_checkpoint(run_dir) is None:  # said, and started over cleanly
            if os.environ.get("RANK", "0") == "0":
                print(f"agentgym-train: no checkpoint yet in {run_dir}; starting over (a new metrics.jsonl)",
                      flush=True)
            resume = False
        elif resume:
            check_resume_identity(run_dir, cfg)  # before anything is built
        self.s: Setup = build_setup(cfg, engine=engine)
        self.main = self.s.dist is None or self.s.dist.is_main
        if self.s.dist is not None and (cfg.algo != "ppo" or cfg.ppo.drop_uniform_groups):
            raise ConfigError(f"algo={cfg.algo} / ppo.drop_uniform_groups under torchrun is not supported: "
                              "run it in one process, or use algo=ppo without dynamic sampling")
        self.step = 0  # PPO steps completed
        self.engine_version = 0  # the policy version (updates done) whose weights the engine holds
        self.sft_done = cfg.sft.steps == 0
        self.resumed = False
        self.score_stats = [0, 0.0, 0.0]  # running count, mean, M2 of scores (reward norm)
        self.health = HealthMonitor(cfg.health)
        self.curriculum = CurriculumSampler(cfg.curriculum, seed=cfg.seed)
        self.held = HeldOut.build(cfg, self.s.make_env)
        self._demo_env: Any = None  # algo=sft: the oracle's train-split env
        self._step_routes: dict[int, Any] | None = None  # R3: this step's engine experts, by episode
        self.producer: Any = None  # rollout.mode=async: the thread collecting the next steps (async_rollout.py)
        self.sft_resume: tuple[int, Any, Any] | None = None  # (step, optimizer, scheduler) of a killed warm start
        self.sft_summary: dict[str, Any] = {}  # the warm start's steps and stop reason (for its verdict)
        if resume:
            self._resume()
            self.engine_version = self.step  # _resume synced the engine
        else:
            if latest_checkpoint(run_dir) is not None:
                raise ConfigError(f"{run_dir} already holds checkpoints of a run; continue it with "
                                  f"`agentgym-train --resume {run_dir}` or pick another log.run_dir")
            if self.main:
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "metrics.jsonl").unlink(missing_ok=True)
                (run_dir / "config.yaml").write_text(yaml.safe_dump(self.s.config_dict, sort_keys=False))
        D.barrier()
        self.log: Any = (MetricsLogger(cfg.log.run_dir, tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb,
                                       config=self.s.config_dict) if self.main else _Silent())
        if not self.resumed:
            e = cfg.env
            how = (f"split {e.eval_split!r}, training on {e.train_split!r}" if self.held.splits else "no splits")
            if self.held.exclude:
                how += "; the trainer keeps them out of training"
            if cfg.log.eval_seed_start:
                how += (f"; from seed {cfg.log.eval_seed_start}, "
                        + ("none of them a problem a run from seed 0 evaluates on" if self.held.skipped_tuning
                           else "the split is too small to skip the problems a run from seed 0 evaluates on"))
            self.log.log("held_out", 0, {"eval_problems": len(self.held.eval),
                                         "check_problems": len(self.held.check), "how": how,
                                         "needs_tool": self.held.needs_tool})
        if self.sft_done and not self.resumed:
            self.s.start_reference(resumed=False)  # no warm start: the initial (or loaded) policy is the anchor

    # ------------------------------------------------------------------ driver
    def run(self) -> dict[str, Any]:
        cfg, s = self.cfg, self.s
        if not self.sft_done:
            from agentgym.trainer.sft import run_sft

            start, opt, sched = self.sft_resume or (0, None, None)
            if cfg.log.eval_every and not start:
                self._evaluate("init", full=False)  # the untrained policy: where it starts
            with s.compute():
                done = run_sft(cfg, s, self.log, held=self.held,
                               check=self._sft_check if cfg.sft.check_every else None, start=start,
                               optimizer=opt, scheduler=sched,
                               checkpoint=self._checkpoint_sft if s.dist is None else None)
            self.sft_done = True
            self.sft_summary = {"steps": int(done["steps"]), "stop_reason": str(done["stop_reason"])}
            s.after_warm_start()
            s.start_reference(resumed=False)
            self._checkpoint()  # before the long evaluation: a kill from here on never redoes the warm start
        if cfg.sft.steps and self.step == 0:  # (a resume from that checkpoint cut the file back before it)
            ev = self._evaluate("warm_start", full=True)
            self._check_warm_start(self._warm_start_verdict(ev, steps=self.sft_summary.get("steps"),
                                                            stop_reason=self.sft_summary.get("stop_reason")))
        elif cfg.sft.load and self.step == 0 and not self.resumed:
            self._check_warm_start(self._load_warm_start())
        bar = Progress(cfg.ppo.steps, cfg.arm(), cfg.log.progress and self.main)
        try:
            while self.step < cfg.ppo.steps:
                m = self.train_step(self.step)
                self.step += 1
                alerts = self.health.check(self.step, m)
                m.update(self.health.flags(alerts), health_alerts=alerts)
                self.log.log("train", self.step, m)
                for a in alerts:
                    bar.note(f"health: {a}")
                bar.update(self.step, f"reward {m.get('reward_mean', 0.0):.3f} kl_ref {m.get('kl_ref', 0):.4f} "
                                      f"{m['t_step']:.1f}s/step" + (f" | {alerts[0]}" if alerts else ""))
                last = self.step == cfg.ppo.steps
                if cfg.log.eval_every and (self.step % cfg.log.eval_every == 0 or last):
                    self._evaluate("ppo", full=last)
                if last or (cfg.log.checkpoint_every and self.step % cfg.log.checkpoint_every == 0):
                    self._checkpoint()
        finally:
            self.close_producer()
            bar.close()
            self.log.close()
            self.held.close()
            if self._demo_env is not None:
                self._demo_env.close()
        if cfg.log.plots and self.main:
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

    # ------------------------------------------------------------------ the warm start's verdict
    def _warm_start_verdict(self, ev: dict[str, Any], *, steps: int | None, stop_reason: str | None,
                            loaded_from: str | None = None) -> dict[str, Any]:
        """The warm start's record (phase ``warm_start``; saved as warm_start/warm_start.json):
        did its tool loop learn (``sft.min_wellformed`` of its held-out episodes at the training
        temperature well formed)?"""
        cfg = self.cfg
        key = "sampled_wellformed" if "sampled_wellformed" in ev else "wellformed"
        wellformed = float(ev.get(key, 0.0))
        rec = {"teacher": cfg.sft.teacher, "steps": steps, "stop_reason": stop_reason,
               "wellformed": wellformed, "min_wellformed": cfg.sft.min_wellformed,
               "failed": wellformed < cfg.sft.min_wellformed, "loaded_from": loaded_from}
        self.log.log("warm_start", 0, rec)
        warm = Path(cfg.log.run_dir) / WARM_START
        if loaded_from is None and self.main and warm.exists():
            spec = self._eval_spec()
            (warm / "warm_start.json").write_text(json.dumps({**rec, "eval": ev, "eval_spec": spec}, indent=1))
        return rec

    def _check_warm_start(self, rec: dict[str, Any]) -> None:
        if rec["failed"]:
            raise WarmStartFailed(
                f"the warm start's tool loop did not learn: {rec['wellformed']:.2f} of its held-out episodes "
                f"at T={self.cfg.rollout.temperature:g} are well formed, below sft.min_wellformed="
                f"{rec['min_wellformed']:g}. This seed counts as failed (nothing was trained after it); "
                f"inspect {Path(self.cfg.log.run_dir) / WARM_START}, or change the warm start "
                "(sft.steps, sft.lr, sft.check_*)")

    def _eval_spec(self) -> dict[str, Any]:
        """What a warm-start evaluation depends on besides the weights: reused across arms only
        when these agree."""
        cfg = self.cfg
        n = cfg.log.eval_episodes_final or cfg.log.eval_episodes
        r = cfg.rollout
        return {"problems": self.held.eval_ids(n), "samples": cfg.log.eval_samples,
                "temperature": r.temperature, "eval_temperature": cfg.log.eval_temperature,
                "eval_sampled": cfg.log.eval_sampled, "engine": r.engine, "engine_kwargs": r.engine_kwargs,
                "engine_weights": r.engine_weights, "engine_dtype": r.engine_dtype,
                "model_dtype": cfg.model.dtype, "device": cfg.model.device, "env": config_env(cfg)}

    def _load_warm_start(self) -> dict[str, Any]:
        """``sft.load``: log the saved warm start's evaluation as this run's (when it was made
        under the same evaluation spec; else evaluate again) and its verdict."""
        path = Path(str(self.cfg.sft.load))
        saved = json.loads((path / "warm_start.json").read_text()) if (path / "warm_start.json").exists() else {}
        if saved.get("eval_spec") == json.loads(json.dumps(self._eval_spec())):
            ev = {**saved["eval"], "loaded_from": str(path)}
            self.log.log("eval", self.step, ev)
        else:
            ev = self._evaluate("warm_start", full=True)
        return self._warm_start_verdict(ev, steps=saved.get("steps"), stop_reason=saved.get("stop_reason"),
                                        loaded_from=str(path))

    def _sft_check(self, step: int) -> dict[str, float]:
        """The warm start's held-out stopping check: pass@1 and pass@k at the training temperature
        on the check problems (none of them an evaluation problem)."""
        cfg, s = self.cfg, self.s
        k = cfg.sft.check_samples
        trajs = collect_fixed(s.eval_collector, temperature=cfg.rollout.temperature, sample_seed=777_000,
                              options=s.eval_options(), seeds=self.held.check_seeds, samples=k)
        rec = eval_record(trajs, cfg.rollout.temperature, samples=k, needs_tool=self.held.needs_tool)
        return {"pass_at_1": rec["pass_at_1"], f"pass_at_{k}": rec[f"pass_at_{k}"],
                "wellformed": rec["wellformed"]}

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, Any]:
        """One step of ``cfg.algo``: collect (or demonstrate), then update, then sync the engine
        every ``rollout.sync_every`` steps."""
        cfg, s = self.cfg, self.s
        t_start = time.perf_counter()
        staleness = step - self.engine_version  # updates the engine's weights are behind
        if cfg.algo == "sft":
            trajs, groups = self._demos(step), None
            metrics: dict[str, Any] = {"demo_episodes": len(trajs)}
        elif cfg.rollout.mode == "async":
            trajs, groups, metrics = self._finish(step, *self._producer(step).take(step))
            staleness = int(metrics["staleness_max"])
        else:
            trajs, groups, metrics = self._collect(step)
        t_rollout = time.perf_counter() - t_start
        t0 = time.perf_counter()
        s.engine_sleep()
        if cfg.algo == "ppo":
            assert groups is not None
            metrics.update(self._ppo(trajs, groups, step))
        else:
            from agentgym.trainer.imitation import imitation_update, successful

            chosen = successful(trajs) if cfg.algo == "rft" else trajs
            if cfg.algo == "rft":
                metrics["rft_kept_frac"] = len(chosen) / max(len(trajs), 1)
            metrics.update(imitation_update(s, cfg, chosen, step))
        if (step + 1) % cfg.rollout.sync_every == 0:
            s.sync_engine(version=step + 1)
            self.engine_version = step + 1
            if self.producer is not None:
                self.producer.notify()
            sync = getattr(s.engine, "last_sync", None) or {}  # in-memory engines report what moved
            if sync:
                metrics.update(t_sync=sync["seconds"], sync_mb=sync["bytes"] / 2**20)
        t_update, t_step = time.perf_counter() - t0, time.perf_counter() - t_start
        metrics.update(t_rollout=t_rollout, t_update=t_update, engine_staleness=staleness, t_step=t_step,
                       t_learner_busy=t_update / max(t_step, 1e-9), lr=s.scheduler.get_last_lr()[0])
        return metrics

    # ------------------------------------------------------------------ collection
    def _producer(self, step: int) -> Any:
        """``rollout.mode: async``: the producer thread, started at ``step`` on first use."""
        if self.producer is None:
            from agentgym.trainer.async_rollout import Producer

            self.s.sync_engine(version=step)  # the learner's weights are version `step` (Ray workers too)
            self.engine_version = step
            self.producer = Producer(self._gather, version=lambda: self.engine_version, start=step,
                                     end=self.cfg.ppo.steps, max_staleness=self.cfg.rollout.max_staleness)
        return self.producer

    def close_producer(self) -> None:
        """Stop the async producer (after the collection it is in, if any)."""
        if self.producer is not None:
            self.producer.close()
            self.producer = None

    def _collect(self, step: int) -> tuple[list[Any], list[int], dict[str, Any]]:
        """This step's episodes from the engine: tasks of the train split (held-out ones replaced
        with ``env.exclude_held_out``), ``samples_per_task`` each."""
        return self._finish(step, *self._gather(step))

    def _gather(self, step: int) -> tuple[list[Any], list[int], Any, Any]:
        """Step ``step``'s raw collection: (episodes, group ids, rollout stats, reset options).
        Runs on the producer thread in ``rollout.mode: async``."""
        cfg, s = self.cfg, self.s
        tasks, k = cfg.rollout.tasks_per_step, cfg.rollout.samples_per_task
        mine = D.group_tasks(tasks, s.dist)  # this rank's rollout group collects these tasks
        seeds, groups = group_seeds(TRAIN_SEED_BASE + step * tasks + mine.start, len(mine), k)
        options: Any = s.train_options()
        if self.curriculum.enabled:  # one level per task, shared by its group
            per_task = self.curriculum.task_options(step, tasks, s.train_options())
            options = [per_task[mine.start + g] for g in groups]
        seeds = self.held.train_seeds(seeds, options if isinstance(options, list) else [options] * len(seeds))
        with s.compute():
            trajs, rstats = s.collector.collect(seeds, temperature=cfg.rollout.temperature,
                                                sample_seed=cfg.seed * 7919 + step * 131 + 7 * mine.start,
                                                options=options)
        # R3: the experts the engine chose for every token (before any later sync changes it)
        self._step_routes = self._routes(trajs) if cfg.rollout.routing_replay else None
        return trajs, groups, rstats, options

    def _finish(self, step: int, trajs: list[Any], groups: list[int], rstats: Any,
                options: Any) -> tuple[list[Any], list[int], dict[str, Any]]:
        """The usable episodes of a collection (lost ones dropped and counted), each with its
        policy version(s), saved; the step's rollout metrics."""
        from agentgym.trainer.async_rollout import stale_episodes, staleness_metrics, stamp_versions

        cfg, s = self.cfg, self.s
        tasks = cfg.rollout.tasks_per_step
        mine = D.group_tasks(tasks, s.dist)
        keep = D.tp_rows(len(trajs), s.dist)  # ranks of one engine split its episodes
        trajs, groups = trajs[keep.start:keep.stop], [mine.start + g for g in groups[keep.start:keep.stop]]
        levels = ([o[cfg.curriculum.option] for o, t in zip(options[keep.start:keep.stop], trajs)
                   if "failed" not in t.meta] if self.curriculum.enabled else [])
        trajs, groups, failed = drop_failed(trajs, groups)  # episodes lost with a Ray worker
        trajs, groups, infra = drop_infra(trajs, groups)  # lost to a dead sandbox / server / engine: no outcome
        k = cfg.rollout.max_staleness
        stale: list[int] = []
        if cfg.rollout.mode == "async":  # versions recorded per token at sampling (async_rollout.py)
            stale = stale_episodes(trajs, step, k)  # never produced by construction: the guard
            trajs = [t for i, t in enumerate(trajs) if i not in stale]
            groups = [g for i, g in enumerate(groups) if i not in stale]
            for t in trajs:  # the oldest weights that sampled a token of it
                t.meta["policy_version"] = min((v for v in t.meta.get("token_versions", []) if v >= 0),
                                               default=self.engine_version)
        else:
            for t in trajs:
                t.meta["policy_version"] = self.engine_version
                stamp_versions(t, self.engine_version)
        overlap = self.held.overlap(trajs, f"step {step + 1}")
        everyone = [t for part in D.all_gather_objects(trajs) for t in part]
        if cfg.log.save_trajectories and self.main:
            from agentgym.trajectory import write_jsonl

            write_jsonl(f"{cfg.log.run_dir}/trajectories.jsonl", everyone, append=True)
        metrics: dict[str, Any] = episode_stats(everyone)
        if cfg.rollout.mode == "async":
            metrics.update(staleness_metrics(everyone, step, k), async_dropped_stale=len(stale))
        metrics.update(episodes_used=float(len(everyone)), gen_s=rstats.gen_seconds, env_s=rstats.env_seconds,
                       episodes_failed=D.all_reduce_sum(failed), episodes_infra=D.all_reduce_sum(infra),
                       held_out_overlap=D.all_reduce_sum(overlap),
                       overlong_frac=sum(1 for t in everyone if self._cut(t)) / max(len(everyone), 1))
        if self.curriculum.enabled:  # every rank's episodes, so all ranks keep the same state
            seen = [x for part in D.all_gather_objects(
                list(zip(levels, [float(episode_success(t)) for t in trajs]))) for x in part]
            self.curriculum.update(step + 1, [lv for lv, _ in seen], [ok for _, ok in seen])
            metrics.update(self.curriculum.metrics())
        return trajs, groups, metrics

    def _ppo(self, trajs: list[Any], groups: list[int], step: int) -> dict[str, Any]:
        """PPO's update on the step's episodes, after dynamic sampling and overlong masking."""
        cfg, s = self.cfg, self.s
        out: dict[str, Any] = {}
        if cfg.ppo.drop_uniform_groups:
            from agentgym.trainer.imitation import informative_groups

            keep = informative_groups(trajs, groups)
            out["groups_dropped_frac"] = 1 - len({groups[i] for i in keep}) / max(len(set(groups)), 1)
            if not keep:  # every group uniform: nothing to learn from this step
                return {**out, "update_skipped": 1.0}
            trajs, groups = [trajs[i] for i in keep], [groups[i] for i in keep]
        batch = make_batch(trajs, groups, pad_id=s.pad_id)
        if self._step_routes is not None:  # R3: the engine's experts, aligned with the batch
            from agentgym.trainer.routing import batch_routes

            batch.routes = batch_routes([self._step_routes[id(t)] for t in trajs], batch.input_ids.shape[1])
        if cfg.ppo.mask_overlong:
            cut = torch.tensor([self._cut(t) for t in trajs])
            batch.policy_mask[cut] = 0.0  # no policy loss; the score still counts in the baseline
        norm = self._update_score_stats if cfg.ppo.normalize_rewards else None
        out.update(ppo_update(s, cfg, batch.to(s.device), step, reward_std=norm))
        return out

    def _cut(self, traj: Any) -> bool:
        """An action of ``traj`` was cut at the token limit (overlong)."""
        from agentgym.trainer.rollout import cut_actions

        return cut_actions(traj, self.cfg.env.max_action_tokens, self.held.stop_ids) > 0

    def _demos(self, step: int) -> list[Any]:
        """``algo: sft``: oracle demonstrations of as many new train problems as PPO's episodes."""
        from agentgym.trainer.sft import demonstrations, find_oracle

        cfg, s = self.cfg, self.s
        if self._demo_env is None:
            self._demo_env = s.make_env(cfg.env.train_split)
        n = cfg.derived()["episodes_per_step"]
        seeds = [SFT_ARM_SEED_BASE + step * n + i for i in range(n)]
        trajs = demonstrations(self._demo_env, find_oracle(cfg.env.id), seeds, s.train_options(), self.held)
        self.held.overlap(trajs, f"step {step + 1}")
        return trajs

    def _routes(self, trajs: list[Any]) -> dict[int, Any]:
        """The engine's experts for every token of ``trajs`` (all of this rollout group's episodes:
        a tensor-parallel engine needs the same call on each of its ranks), by episode."""
        from agentgym.trainer.routing import engine_routing

        engine = getattr(self.s.engine, "inner", self.s.engine)  # every rank of a group calls it alike
        with self.s.compute():
            found = engine_routing(engine, [t.tokens for t in trajs])
        return {id(t): r for t, r in zip(trajs, found, strict=True)}

    def _update_score_stats(self, scores: torch.Tensor) -> float:
        n, mean, m2 = self.score_stats  # Welford over every score seen so far (all ranks')
        for x in scores.tolist():
            n += 1
            d = x - mean
            mean += d / n
            m2 += d * (x - mean)
        self.score_stats = [n, mean, m2]
        return max(math.sqrt(m2 / max(n - 1, 1)), 1e-3)

    # ------------------------------------------------------------------ eval / checkpoints
    def _evaluate(self, stage: str, *, full: bool = False) -> dict[str, Any]:
        """The held-out problems (``heldout.py``) at ``log.eval_temperature`` and, with
        ``log.eval_sampled``, at the rollout temperature (``log.eval_samples`` samples per problem
        when ``full``; see ``evaluation.py``). ``stage``: ``init`` (before the warm start),
        ``warm_start`` (right after it) or ``ppo`` (any arm's steps). ``full``: the warm start and
        the end, which the report compares, use ``log.eval_episodes_final`` problems. A stale
        engine is synced first. Under torchrun the rollout groups split the problems."""
        cfg, s = self.cfg, self.s
        if self.engine_version != self.step and self.sft_done:
            s.sync_engine()  # evaluate the current policy, not the engine's stale copy
            self.engine_version = self.step
        n = (cfg.log.eval_episodes_final or cfg.log.eval_episodes) if full else cfg.log.eval_episodes
        seeds, ids = self.held.eval_seeds(n), self.held.eval_ids(n)
        mine = _share(len(seeds), s.dist)
        runs = [("", cfg.log.eval_temperature, 1)]
        if cfg.log.eval_sampled:
            runs.append(("sampled_", cfg.rollout.temperature, cfg.log.eval_samples if full else 1))
        m: dict[str, Any] = {"stage": stage}
        for prefix, temperature, samples in runs:
            what = STAGE_NAMES.get(stage, stage).format(arm=ARM_NAMES.get(cfg.arm(), cfg.arm()))
            bar = Progress(len(mine) * samples, f"eval {what} T={temperature:g}",
                           cfg.log.progress and self.main)
            try:
                with s.compute():
                    trajs = collect_fixed(s.eval_collector, temperature=temperature,
                                          sample_seed=12345 + mine.start * samples, options=s.eval_options(),
                                          seeds=[seeds[i] for i in mine], samples=samples, on_chunk=bar.update)
            finally:
                bar.close()
            trajs, _, _ = drop_failed(trajs, list(range(len(trajs))))  # lost with a Ray worker
            trajs, _, infra = drop_infra(trajs, list(range(len(trajs))))  # no outcome: not a failure either
            if s.dist is not None and s.dist.tp_rank:
                trajs, infra = [], 0  # the other ranks of this engine hold the same episodes
            m.update(eval_record([t for part in D.all_gather_objects(trajs) for t in part], temperature, prefix,
                                 samples=samples, needs_tool=self.held.needs_tool, task_ids=ids))
            m[prefix + "episodes_infra"] = D.all_reduce_sum(infra)
        self.log.log("eval", self.step, m)
        return m

    def _checkpoint(self) -> None:
        cfg, s = self.cfg, self.s
        state = {"sft_done": self.sft_done, "sft_summary": self.sft_summary, "score_stats": self.score_stats,
                 "metrics_lines": len(read_metrics(cfg.log.run_dir)) if self.main else 0,
                 "world_size": s.dist.world if s.dist is not None else 1,
                 "curriculum": self.curriculum.state_dict()}
        save_checkpoint(cfg.log.run_dir, self.step, model=s.model, optimizer=s.optimizer,
                        scheduler=s.scheduler, value_head=s.value_head, state=state,
                        keep=cfg.log.keep_checkpoints, tokenizer=s.tokenizer,
                        export_dtype=getattr(torch, cfg.log.export_dtype))

    def _checkpoint_sft(self, sft_step: int, optimizer: Any, scheduler: Any) -> None:
        """A checkpoint inside the warm start: the policy with the warm start's own optimizer."""
        cfg, s = self.cfg, self.s
        state = {"sft_done": False, "sft_step": sft_step, "score_stats": self.score_stats,
                 "metrics_lines": len(read_metrics(cfg.log.run_dir)) if self.main else 0, "world_size": 1,
                 "curriculum": self.curriculum.state_dict()}
        save_checkpoint(cfg.log.run_dir, 0, model=s.model, optimizer=optimizer, scheduler=scheduler,
                        value_head=s.value_head, state=state, keep=cfg.log.keep_checkpoints)

    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.cfg.log.run_dir)
        if ckpt is None:
            return  # Trainer.__init__ said so and started over
        s = self.s
        mid_warm_start = "sft_step" in json.loads((ckpt / "state.json").read_text())
        if mid_warm_start:  # killed during the warm start: its own optimizer and schedule come back
            from agentgym.trainer.sft import sft_optimizer

            opt, sched = sft_optimizer(self.cfg, s.model)
            state = load_checkpoint(ckpt, model=s.model, optimizer=opt, scheduler=sched, value_head=s.value_head)
            self.sft_resume = (int(state["sft_step"]), opt, sched)
        else:
            state = load_checkpoint(ckpt, model=s.model, optimizer=s.optimizer, scheduler=s.scheduler,
                                    value_head=s.value_head)
        self.resumed = True
        self.step = int(state["step"])
        self.sft_done = bool(state["sft_done"])
        self.sft_summary = dict(state.get("sft_summary", {}))
        self.score_stats = list(state["score_stats"])
        if "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        # The optimizer state brings back the saved lr and weight decay; the config decides
        # (a resume may change ppo.lr on purpose). Unchanged values give the same floats.
        lr = self.cfg.ppo.lr
        s.scheduler.base_lrs = [lr] * len(s.optimizer.param_groups)
        for g, factor in zip(s.optimizer.param_groups, s.scheduler.lr_lambdas, strict=True):
            g["initial_lr"], g["weight_decay"] = lr, self.cfg.ppo.weight_decay
            g["lr"] = lr * factor(s.scheduler.last_epoch)
        if self.main:
            truncate_metrics(self.cfg.log.run_dir, int(state["metrics_lines"]))
        for r in read_metrics(self.cfg.log.run_dir, "train"):  # the health series so far
            self.health.check(int(r["step"]), r)
        if self.sft_done:
            s.start_reference(resumed=True)
        s.sync_engine()


def config_env(cfg: TrainConfig) -> dict[str, Any]:
    """The env settings an evaluation depends on."""
    import dataclasses

    return dataclasses.asdict(cfg.env)


def _share(n: int, info: D.DistInfo | None) -> range:
    """This rank's rollout group's part of ``n`` items (contiguous, sizes differ by at most 1)."""
    if info is None:
        return range(n)
    lo, hi = n * info.group // info.groups, n * (info.group + 1) // info.groups
    return range(lo, hi)

