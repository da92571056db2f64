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
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agentgym.errors import CheckpointError, ConfigError
from agentgym.trainer import distributed as D
from agentgym.trainer.batch import make_batch
from agentgym.trainer.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_model,
)
from agentgym.trainer.config import TrainConfig
from agentgym.trainer.curriculum import CurriculumSampler
from agentgym.trainer.evaluation import collect_fixed, eval_record
from agentgym.trainer.health import HealthMonitor
from agentgym.trainer.metrics import (
    MetricsLogger,
    Progress,
    episode_stats,
    episode_success,
    read_metrics,
    truncate_metrics,
)
from agentgym.trainer.ray_rollout import drop_failed
from agentgym.trainer.rollout import Collector, group_seeds
from agentgym.trainer.update import check_finite, ppo_update

__all__ = ["Setup", "Trainer", "build_setup", "check_finite", "load_weights"]

TRAIN_SEED_BASE = 1_000_000  # task seeds of PPO step s: TRAIN_SEED_BASE + s * tasks_per_step + i
EVAL_SEED_BASE = 0  # eval tasks: seeds 0..eval_episodes-1 of the eval split, every time
REFERENCE = "reference"  # RUN_DIR/reference: the KL anchor, saved once


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
        elif cfg.model.init_from:
            load_weights(self.model, cfg.model.init_from)
        self.model.train()
        self.params = list(self.model.parameters()) + (
            list(self.value_head.parameters()) if self.value_head is not None else [])
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.ppo.lr, weight_decay=cfg.ppo.weight_decay)
        warm = max(cfg.ppo.warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda i: min(1.0, (i + 1) / warm))
        self.ref_model: torch.nn.Module | None = None
        self._engine_synced = False  # True when the engine was just filled with these weights
        if engine is None:
            engine = self._make_engine(self._engine_copy() if self.dist is not None else self.model)
        if cfg.rollout.sleep_level and not (hasattr(engine, "sleep") and hasattr(engine, "wake_up")):
            raise ConfigError(f"rollout.sleep_level={cfg.rollout.sleep_level}: the {cfg.rollout.engine} "
                              "engine cannot sleep (no sleep/wake_up); set rollout.sleep_level=0")
        if self.dist is not None and dc.rollout_tp > 1:  # envs on the group's first rank (tp_rollout.py)
            from agentgym.trainer.tp_rollout import GroupEngine

            engine = GroupEngine(engine, self.dist, mirror=bool(getattr(engine, "in_process", False)))
        self.engine = engine
        self.engine_asleep = False
        if not self._engine_synced:
            self.sync_engine()

        tokenizer = self.tokenizer  # captured alone, so make_env pickles for Ray workers

        def make_env() -> Any:
            return gym.make(cfg.env.id, tokenizer=tokenizer, reward_mode=cfg.env.reward_mode,
                            max_turns=cfg.env.max_turns, max_tokens=cfg.env.max_tokens,
                            max_action_tokens=cfg.env.max_action_tokens, prompt=cfg.env.prompt,
                            **cfg.env.kwargs)

        self.make_env = make_env
        self.collector: Any
        self.eval_collector: Any
        if cfg.rollout.backend == "ray":  # rollout workers as Ray actors (ray_rollout.py)
            from agentgym.trainer.ray_rollout import RayCollector

            if self.dist is not None:
                raise ConfigError("rollout.backend=ray under torchrun is not supported: each rank "
                                  "collects with its own engine; use rollout.backend=local")
            self.collector = self.eval_collector = RayCollector.from_config(cfg, make_env, self.model, self.pad_id)
        else:
            groups = self.dist.groups if self.dist is not None else 1  # this rank's engine's share
            n_train = cfg.derived()["episodes_per_step"] // groups

            def collector(n: int) -> Any:
                from agentgym.trainer.tp_rollout import GroupCollector, GroupEngine

                if not isinstance(self.engine, GroupEngine):
                    return Collector.from_factory(make_env, n, self.engine, max_new_tokens=cfg.env.max_action_tokens,
                                                  max_workers=cfg.rollout.max_workers)
                inner = Collector.from_factory(make_env, n, self.engine, max_new_tokens=cfg.env.max_action_tokens,
                                               max_workers=cfg.rollout.max_workers) if self.engine.is_leader else None
                return GroupCollector(inner, self.engine, n)

            self.collector = collector(n_train)
            self.eval_collector = collector(cfg.log.eval_episodes)
        from agentgym.trainer.config import config_to_dict

        self.config_dict = config_to_dict(cfg)

    # ------------------------------------------------------------------ building
    def _build_policy(self, *, meta: bool | None = None) -> tuple[Any, torch.nn.Module]:
        """(tokenizer, policy) in float32. Under torchrun the policy is built on the meta device
        (no memory; weights arrive after sharding, :meth:`_load_initial_weights`)."""
        from agentgym.tokenizers import ByteTokenizer, as_tokenizer
        from agentgym.trainer.attention import set_attention
        from agentgym.trainer.model import (
            build_tiny_for,
            build_tiny_gptoss,
            is_tiny,
            load_policy,
            resolve_attention,
            tiny_tokenizer,
        )

        m = self.cfg.model
        meta = self.dist is not None if meta is None else meta
        tok: Any
        if m.tokenizer == "auto" and is_tiny(m.name):  # tiny: byte; tiny:o200k_harmony: GPT-OSS's own
            tok = tiny_tokenizer(m.name)
        else:
            tok_name = m.name if m.tokenizer == "auto" else m.tokenizer
            tok = ByteTokenizer() if tok_name == "byte" else as_tokenizer(tok_name)
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
        if self.cfg.model.init_from:
            load_weights(self.model, self.cfg.model.init_from)
            return
        full = self._build_policy(meta=False)[1].state_dict() if self.dist is not None and self.dist.is_main else {}
        D.load_full_state(self.model, full)

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

    def sync_engine(self) -> None:
        """Free the gradients (the update is over), wake the engine if it sleeps, then push the
        current weights (in the compute dtype)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.engine_asleep:
            self.engine.wake_up()
            self.engine_asleep = False
        if self.dist is None:
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
        if self.cfg.ppo.kl_coef <= 0:
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
        """Save the warm-started weights once (``RUN_DIR/warm_start``: the common starting point of
        comparisons such as bench/trl_grpo_bench.py)."""
        warm = Path(self.cfg.log.run_dir) / "warm_start"
        if not (warm / "config.json").exists():
            save_model(self.model, warm)

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
        self.s: Setup = build_setup(cfg, engine=engine)
        self.main = self.s.dist is None or self.s.dist.is_main
        self.step = 0  # PPO steps completed
        self.sft_done = cfg.sft.steps == 0
        self.resumed = False
        self.score_stats = [0, 0.0, 0.0]  # running count, mean, M2 of scores (reward norm)
        self.health = HealthMonitor(cfg.health)
        self.curriculum = CurriculumSampler(cfg.curriculum, seed=cfg.seed)
        run_dir = Path(cfg.log.run_dir)
        if resume:
            self._resume()
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
        if self.sft_done and not self.resumed:
            self.s.start_reference(resumed=False)  # no warm start: the initial policy is the anchor

    # ------------------------------------------------------------------ driver
    def run(self) -> dict[str, Any]:
        cfg, s = self.cfg, self.s
        if not self.sft_done:
            from agentgym.trainer.sft import run_sft

            if cfg.log.eval_every:
                self._evaluate("init", full=False, sampled=True)  # the untrained policy: where it starts
            with s.compute():
                run_sft(cfg, s, self.log)
            self.sft_done = True
            s.after_warm_start()
            s.start_reference(resumed=False)
            self._evaluate("warm_start", full=True, sampled=True)
            self._checkpoint()
        bar = Progress(cfg.ppo.steps, "ppo", cfg.log.progress and self.main)
        try:
            while self.step < cfg.ppo.steps:
                m = self.train_step(self.step)
                self.step += 1
                alerts = self.health.check(self.step, m)
                m.update(self.health.flags(alerts), health_alerts=alerts)
                self.log.log("train", self.step, m)
                for a in alerts:
                    bar.note(f"health: {a}")
                bar.update(self.step, f"reward {m['reward_mean']:.3f} kl_ref {m.get('kl_ref', 0):.4f} "
                                      f"{m['t_step']:.1f}s/step" + (f" | {alerts[0]}" if alerts else ""))
                last = self.step == cfg.ppo.steps
                if cfg.log.eval_every and (self.step % cfg.log.eval_every == 0 or last):
                    self._evaluate("ppo", full=last, sampled=last)
                if last or (cfg.log.checkpoint_every and self.step % cfg.log.checkpoint_every == 0):
                    self._checkpoint()
        finally:
            bar.close()
            self.log.close()
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

    # ------------------------------------------------------------------ one PPO step
    def train_step(self, step: int) -> dict[str, Any]:
        cfg, s = self.cfg, self.s
        t_start = time.perf_counter()
        tasks, k = cfg.rollout.tasks_per_step, cfg.rollout.samples_per_task
        mine = D.group_tasks(tasks, s.dist)  # this rank's rollout group collects these tasks
        seeds, groups = group_seeds(TRAIN_SEED_BASE + step * tasks + mine.start, len(mine), k)
        options: Any = cfg.env.train_options
        if self.curriculum.enabled:  # one level per task, shared by its group
            per_task = self.curriculum.task_options(step, tasks, cfg.env.train_options)
            options = [per_task[mine.start + g] for g in groups]
        with s.compute():
            trajs, rstats = s.collector.collect(seeds, temperature=cfg.rollout.temperature,
                                                sample_seed=cfg.seed * 7919 + step * 131 + 7 * mine.start,
                                                options=options)
        routes = self._routes(trajs) if cfg.rollout.routing_replay else None
        keep = D.tp_rows(len(trajs), s.dist)  # ranks of one engine split its episodes
        trajs, groups = trajs[keep.start:keep.stop], [mine.start + g for g in groups[keep.start:keep.stop]]
        levels = ([o[cfg.curriculum.option] for o, t in zip(options[keep.start:keep.stop], trajs)
                   if "failed" not in t.meta] if self.curriculum.enabled else [])
        trajs, groups, failed = drop_failed(trajs, groups)  # episodes lost with a Ray worker
        everyone = [t for part in D.all_gather_objects(trajs) for t in part]
        if cfg.log.save_trajectories and self.main:
            from agentgym.trajectory import write_jsonl

            write_jsonl(f"{cfg.log.run_dir}/trajectories.jsonl", everyone, append=True)
        batch = make_batch(trajs, groups, pad_id=s.pad_id)
        if routes is not None:  # R3: the engine's experts, aligned with the batch
            from agentgym.trainer.routing import batch_routes

            batch.routes = batch_routes([routes[id(t)] for t in trajs], batch.input_ids.shape[1])
        batch = batch.to(s.device)
        t_rollout = time.perf_counter() - t_start
        metrics: dict[str, Any] = episode_stats(everyone)
        metrics.update(gen_s=rstats.gen_seconds, env_s=rstats.env_seconds,
                       episodes_failed=D.all_reduce_sum(failed))
        if self.curriculum.enabled:  # every rank's episodes, so all ranks keep the same state
            seen = [x for part in D.all_gather_objects(
                list(zip(levels, [float(episode_success(t)) for t in trajs]))) for x in part]
            self.curriculum.update(step + 1, [lv for lv, _ in seen], [ok for _, ok in seen])
            metrics.update(self.curriculum.metrics())

        t0 = time.perf_counter()
        norm = self._update_score_stats if cfg.ppo.normalize_rewards else None
        s.engine_sleep()
        metrics.update(ppo_update(s, cfg, batch, step, reward_std=norm))
        s.sync_engine()
        sync = getattr(s.engine, "last_sync", None) or {}  # in-memory engines report what moved
        if sync:
            metrics.update(t_sync=sync["seconds"], sync_mb=sync["bytes"] / 2**20)
        metrics.update(t_rollout=t_rollout, t_update=time.perf_counter() - t0,
                       t_step=time.perf_counter() - t_start, lr=s.scheduler.get_last_lr()[0])
        return metrics

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
    def _evaluate(self, stage: str, *, full: bool = False, sampled: bool = False) -> dict[str, Any]:
        """Fixed tasks at ``log.eval_temperature`` (and, if ``sampled`` and ``log.eval_sampled``,
        at the rollout temperature; see ``evaluation.py``). ``stage``: ``init`` (before the warm
        start), ``warm_start`` (right after it) or ``ppo``. ``full``: the warm start and the end
        of PPO, which the report compares, use ``log.eval_episodes_final`` tasks. Under torchrun
        the rollout groups split the tasks."""
        cfg, s = self.cfg, self.s
        n = (cfg.log.eval_episodes_final or cfg.log.eval_episodes) if full else cfg.log.eval_episodes
        mine = _share(n, s.dist)
        runs = [("", cfg.log.eval_temperature)]
        if cfg.log.eval_sampled and sampled:
            runs.append(("sampled_", cfg.rollout.temperature))
        m: dict[str, Any] = {"stage": stage}
        for prefix, temperature in runs:
            with s.compute():
                trajs = collect_fixed(s.eval_collector, len(mine), temperature=temperature,
                                      sample_seed=12345 + mine.start, options=cfg.env.eval_options,
                                      seed_base=EVAL_SEED_BASE + mine.start)
            trajs, _, _ = drop_failed(trajs, list(range(len(trajs))))  # lost with a Ray worker
            if s.dist is not None and s.dist.tp_rank:
                trajs = []  # the other ranks of this engine hold the same episodes
            m.update(eval_record([t for part in D.all_gather_objects(trajs) for t in part], temperature, prefix))
        self.log.log("eval", self.step, m)
        return m

    def _checkpoint(self) -> None:
        cfg, s = self.cfg, self.s
        state = {"sft_done": self.sft_done, "score_stats": self.score_stats,
                 "metrics_lines": len(read_metrics(cfg.log.run_dir)) if self.main else 0,
                 "world_size": s.dist.world if s.dist is not None else 1,
                 "curriculum": self.curriculum.state_dict()}
        save_checkpoint(cfg.log.run_dir, self.step, model=s.model, optimizer=s.optimizer,
                        scheduler=s.scheduler, value_head=s.value_head, state=state,
                        keep=cfg.log.keep_checkpoints, tokenizer=s.tokenizer,
                        export_dtype=getattr(torch, cfg.log.export_dtype))

    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.cfg.log.run_dir)
        if ckpt is None:
            return  # nothing saved yet: start over (the metrics file is reset by build_setup)
        s = self.s
        state = load_checkpoint(ckpt, model=s.model, optimizer=s.optimizer, scheduler=s.scheduler,
                                value_head=s.value_head)
        self.resumed = True
        self.step = int(state["step"])
        self.sft_done = bool(state["sft_done"])
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


def _share(n: int, info: D.DistInfo | None) -> range:
    """This rank's rollout group's part of ``n`` items (contiguous, sizes differ by at most 1)."""
    if info is None:
        return range(n)
    lo, hi = n * info.group // info.groups, n * (info.group + 1) // info.groups
    return range(lo, hi)

