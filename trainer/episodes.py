"""The rollout side of a run: the engine, the envs, and one step's collection.

    rollouts = Rollouts(cfg, learner)          # engine + collectors, synced with the learner
    episodes, groups, metrics = rollouts.collect(step)   # Episode records (algo/episode.py)
    rollouts.sync(step + 1)                    # push the updated weights to the engine

The engine samples from the learner's module itself (``rollout.engine_weights: shared``) or
from its own copy (``copy``, ``rollout.engine_dtype``; always under torchrun), or is vLLM or a
server, synced with the learner every ``rollout.sync_every`` steps; every training episode
records the policy version that sampled it (``Episode.policy_version``; per token:
``Episode.versions``), written with it to ``trajectories.jsonl`` (``Episode.record``). With ``rollout.mode: async`` a producer thread collects the next
steps while the learner updates, at most ``rollout.max_staleness`` versions behind
(``rollout/staleness.py``); with ``rollout.backend: ray`` the envs and engines are Ray actors
(``rollout/ray_collector.py``); under torchrun each rollout group collects its share of the tasks
(``rollout/tp_collector.py``).

Task seeds are a function of ``(seed, step, task)``: step ``s`` plays ``TRAIN_SEED_BASE + seed x
10^8 + s * tasks_per_step + i`` (``TrainConfig.stream``; held-out problems replaced with ``env.exclude_held_out``,
:class:`~agentgym.trainer.rollout.heldout.HeldOut`), ``samples_per_task`` times each.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from agentgym.errors import ConfigError

from .algo.batch import Batch, make_batch
from .algo.episode import Episode
from .algo.imitation import informative_groups
from .config import TrainConfig
from .curriculum import CurriculumSampler
from .distributed import GatheredWeights
from .metrics import episode_stats, episode_success
from .model import sharding
from .model.lora import MergedWeights
from .model.routing import batch_routes, engine_routing
from .plan import check_engine_checkpoint
from .rollout.collector import Collector, cut_actions, drop_infra, group_seeds, make_prefix_engine
from .rollout.demos import demonstrations, find_oracle
from .rollout.engines import make_engine
from .rollout.engines.base import engine_abilities
from .rollout.heldout import CHECK_SEED_BASE, HeldOut
from .rollout.ray_collector import FAULT_COUNTS, RayCollector, drop_failed
from .rollout.staleness import Producer, VersionedEngine, stale_episodes, staleness_metrics, stamp_versions
from .rollout.tp_collector import GroupCollector, GroupEngine

if TYPE_CHECKING:
    from .learner import Learner

__all__ = ["SFT_ARM_SEED_BASE", "TRAIN_SEED_BASE", "Rollouts"]

TRAIN_SEED_BASE = 1_000_000  # task seeds of PPO step s: TRAIN_SEED_BASE + s * tasks_per_step + i
SFT_ARM_SEED_BASE = 2_000_000  # algo=sft: step s demonstrates seeds SFT_ARM_SEED_BASE + s * episodes + i


def held_out(cfg: TrainConfig, make_env: Any) -> HeldOut:
    """The run's held-out problem sets: ``log.eval_episodes`` (or ``eval_episodes_final``, the
    larger) evaluation problems from ``log.eval_seed_start``, and ``sft.check_problems``
    stopping-check problems from the run's check stream when the warm start runs a check."""
    sc = cfg.sft
    checks = bool(sc.check_every) and max(sc.check_from, sc.check_every) <= sc.steps and not sc.load
    return HeldOut.build(cfg.env, make_env, n_eval=max(cfg.log.eval_episodes, cfg.log.eval_episodes_final or 0),
                         eval_seed_start=cfg.log.eval_seed_start, n_check=sc.check_problems if checks else 0,
                         check_start=cfg.stream(CHECK_SEED_BASE))


class Rollouts:
    """Engine, train and eval collectors, held-out problems and curriculum of one run."""

    def __init__(self, cfg: TrainConfig, learner: Learner, engine: Any = None) -> None:
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the environments)

        self.cfg, self.learner = cfg, learner
        self.version = 0  # the policy version (updates done) whose weights the engine holds
        self.asleep = False
        self._synced = False  # True when the engine was just built from the learner's weights
        if engine is None:
            engine = self._make_engine(self._engine_model())
        abilities = engine_abilities(engine)
        if cfg.rollout.sleep_level and not abilities.sleeps:
            raise ConfigError(f"rollout.sleep_level={cfg.rollout.sleep_level}: the {cfg.rollout.engine} "
                              f"engine cannot sleep ({type(engine).__name__} declares no sleep/wake_up: "
                              "abilities.sleeps is false); set rollout.sleep_level=0")
        self.own_engine = engine  # the engine itself, before the wrappers below
        dist = learner.dist
        if dist is not None and cfg.distributed.rollout_tp > 1:  # envs on the group's first rank

            engine = GroupEngine(engine, dist, mirror=abilities.collective)
        if cfg.rollout.mode == "async":  # every sample says which weights made it (rollout/staleness.py)

            if dist is not None:
                raise ConfigError("rollout.mode=async under torchrun is not supported: expected one process; "
                                  "fix: run without torchrun, or rollout.mode=sync")
            engine = VersionedEngine(engine)
        self.engine = engine
        if not self._synced:
            self._push()

        tokenizer = learner.tokenizer  # captured alone, so make_env pickles for Ray workers
        env_cfg = cfg.env

        def make_env(split: str | None = env_cfg.train_split) -> Any:
            """An env of ``split`` (given as the constructor argument; null: the env's own)."""
            extra: dict[str, Any] = {"split": split} if split is not None else {}
            return gym.make(env_cfg.id, tokenizer=tokenizer, reward_mode=env_cfg.reward_mode,
                            max_turns=env_cfg.max_turns, max_tokens=env_cfg.max_tokens,
                            max_action_tokens=env_cfg.max_action_tokens, prompt=env_cfg.prompt,
                            **env_cfg.kwargs, **extra)

        self.make_env = make_env
        self.collector: Any
        self.eval_collector: Any
        if cfg.rollout.backend == "ray":  # rollout workers as Ray actors (rollout/ray_collector.py)
            if dist is not None:
                raise ConfigError("rollout.backend=ray under torchrun is not supported: each rank "
                                  "collects with its own engine; use rollout.backend=local")
            # one pool of train-split envs; evaluation passes split=eval as a reset option
            self.collector = self.eval_collector = RayCollector.from_config(
                cfg.rollout, make_env, learner.model, learner.pad_id, env_id=env_cfg.id, env_kwargs=env_cfg.kwargs,
                max_new_tokens=env_cfg.max_action_tokens, threads=cfg.threads)
        else:
            n_train = cfg.derived()["episodes_per_step"] // learner.ranks.groups  # this engine's share
            self.collector = self._collector(make_env, n_train)
            self.eval_collector = self._collector(lambda: make_env(env_cfg.eval_split), cfg.log.eval_episodes)
        self.held = held_out(cfg, make_env)
        self.curriculum = CurriculumSampler(cfg.curriculum, seed=cfg.seed)
        self.producer: Any = None  # rollout.mode=async: the thread collecting the next steps
        self._demo_env: Any = None  # algo=sft: the oracle's train-split env
        self.step_routes: dict[int, Any] | None = None  # R3: this step's engine experts, by episode

    # ------------------------------------------------------------------ building
    def _collector(self, factory: Any, n: int) -> Any:
        kw = dict(max_new_tokens=self.cfg.env.max_action_tokens, max_workers=self.cfg.rollout.max_workers)
        if not isinstance(self.engine, GroupEngine):
            return Collector.from_factory(factory, n, self.engine, **kw)
        inner = Collector.from_factory(factory, n, self.engine, **kw) if self.engine.is_leader else None
        return GroupCollector(inner, self.engine, n)

    def _engine_model(self) -> torch.nn.Module:
        """What an in-process engine samples from: the learner's module (``engine_weights:
        shared``), or its own copy in ``rollout.engine_dtype``, filled by :meth:`sync`; under
        torchrun an unsharded copy for this rank's engine."""
        r, learner = self.cfg.rollout, self.learner
        if learner.dist is not None:
            if r.engine != "hf":
                return learner.model

            return sharding.materialize(learner.build_policy(meta=True)[1], learner.device).to(learner.compute_dtype)
        if r.engine == "hf" and r.engine_weights == "copy":
            dtype = learner.compute_dtype if r.engine_dtype == "auto" else getattr(torch, r.engine_dtype)
            return copy.deepcopy(learner.model).to(dtype).requires_grad_(False)
        return learner.model

    def _make_engine(self, model: torch.nn.Module) -> Any:
        cfg, learner = self.cfg, self.learner
        kw = dict(cfg.rollout.engine_kwargs)
        if cfg.rollout.engine == "hf":
            kw.setdefault("model", model)
            kw.setdefault("pad_id", learner.pad_id)
            if cfg.rollout.prefix_cache:
                return make_prefix_engine(**kw)
        if cfg.rollout.engine == "vllm":
            if learner.dist is not None:  # inside this torchrun job, one engine per rollout group
                kw.setdefault("distributed_executor_backend", "external_launcher")
                kw.setdefault("tensor_parallel_size", cfg.distributed.rollout_tp)
                kw.setdefault("seed", cfg.seed)  # the ranks of one engine must sample alike
            if "model" in kw:
                check_engine_checkpoint(str(kw["model"]))
            else:  # built from our config, filled from our weights in memory: names and dtypes match

                kw["model"] = (GatheredWeights(learner.model, learner.compute_dtype) if learner.dist is not None
                               else self._weights(model))
                self._synced = True
        return make_engine(cfg.rollout.engine, **kw)

    # ------------------------------------------------------------------ engine <-> learner
    def _weights(self, model: torch.nn.Module) -> Any:
        """What an engine with its own weights loads: the learner's module, or with LoRA the base
        with the adapters folded in, computed in memory at each sync (``lora.MergedWeights``);
        the hf engine sharing the learner's module applies the adapters itself."""
        if self.learner.peft is None or self.cfg.rollout.engine == "hf":
            return model
        return MergedWeights(model)

    def sleep(self) -> None:
        """Free the engine's GPU memory for the update (``rollout.sleep_level``)."""
        if self.cfg.rollout.sleep_level:
            self.engine.sleep(level=self.cfg.rollout.sleep_level)
            self.asleep = True

    def _push(self, version: int | None = None) -> None:
        """Free the gradients (the update is over), wake the engine if it sleeps, then push the
        learner's weights (in the compute dtype). ``rollout.mode: async``: they are policy
        ``version``, which the samples made from them record; Ray workers load them at their
        next unit."""
        learner = self.learner
        learner.optimizer.zero_grad(set_to_none=True)
        if self.asleep:
            self.engine.wake_up()
            self.asleep = False
        if self.cfg.rollout.mode == "async":
            self.engine.sync_weights(learner.model, version=version)
            if self.cfg.rollout.backend == "ray" and version is not None:
                self.collector.sync_weights(learner.model, version=version)
        elif learner.dist is None:
            self.engine.sync_weights(self._weights(learner.model))
        else:
            self.engine.sync_weights(GatheredWeights(learner.model, learner.compute_dtype))

    def sync(self, version: int) -> dict[str, float]:
        """The engine samples policy ``version`` (updates done) from now on -> what the sync
        moved (in-memory engines report it)."""
        self._push(version)
        self.version = version
        if self.producer is not None:
            self.producer.notify()
        moved = (self.engine.last_sync if engine_abilities(self.engine).reports_sync else None) or {}
        return {"t_sync": moved["seconds"], "sync_mb": moved["bytes"] / 2**20} if moved else {}

    def refresh(self, version: int | None = None) -> None:
        """Push the learner's weights outside the step (before an evaluation, after a warm start
        or a resume); ``version``: the updates they hold, when known."""
        self._push()
        if version is not None:
            self.version = version

    def train_options(self) -> dict[str, Any]:
        """Reset options of training episodes: ``env.train_options`` plus the split."""
        e = self.cfg.env
        return {**e.train_options, **({"split": e.train_split} if e.train_split is not None else {})}

    def eval_options(self) -> dict[str, Any]:
        """Reset options of evaluation episodes: ``env.eval_options`` plus the split."""
        e = self.cfg.env
        return {**e.eval_options, **({"split": e.eval_split} if e.eval_split is not None else {})}

    # ------------------------------------------------------------------ one step's episodes
    def collect(self, step: int) -> tuple[list[Episode], list[int], dict[str, Any]]:
        """Step ``step``'s usable episodes, their group (task) ids and the rollout metrics:
        sampled now (``sync``), taken from the producer (``async``), or oracle demonstrations
        of new problems (``algo: sft``; no groups)."""
        staleness = step - self.version  # updates the engine's weights are behind
        if self.cfg.algo == "sft":
            trajs = self._demos(step)
            return trajs, [], {"demo_episodes": len(trajs), "engine_staleness": staleness}
        if self.cfg.rollout.mode == "async":
            trajs, groups, metrics = self._finish(step, *self._producer(step).take(step))
            return trajs, groups, {**metrics, "engine_staleness": int(metrics["staleness_max"])}
        trajs, groups, metrics = self._finish(step, *self._gather(step))
        return trajs, groups, {**metrics, "engine_staleness": staleness}

    def _producer(self, step: int) -> Any:
        """``rollout.mode: async``: the producer thread, started at ``step`` on first use."""
        if self.producer is None:
            self._push(version=step)  # the learner's weights are version `step` (Ray workers too)
            self.version = step
            self.producer = Producer(self._gather, version=lambda: self.version, start=step,
                                     end=self.cfg.ppo.steps, max_staleness=self.cfg.rollout.max_staleness)
        return self.producer

    def _gather(self, step: int) -> tuple[list[Episode], list[int], Any, Any]:
        """Step ``step``'s raw collection: (episodes, group ids, rollout stats, reset options).
        Runs on the producer thread in ``rollout.mode: async``."""
        cfg, learner = self.cfg, self.learner
        tasks, k = cfg.rollout.tasks_per_step, cfg.rollout.samples_per_task
        mine = learner.ranks.tasks(tasks)  # this rank's rollout group collects these tasks
        seeds, groups = group_seeds(cfg.stream(TRAIN_SEED_BASE) + step * tasks + mine.start, len(mine), k)
        options: Any = self.train_options()
        if self.curriculum.enabled:  # one level per task, shared by its group
            per_task = self.curriculum.task_options(step, tasks, self.train_options())
            options = [per_task[mine.start + g] for g in groups]
        if (key := cfg.env.sample_option) is not None:  # each sample of a task its own index (e.g. its faults)
            per = options if isinstance(options, list) else [options] * len(seeds)
            options = [{**o, key: i % k} for i, o in enumerate(per)]
        seeds = self.held.train_seeds(seeds, options if isinstance(options, list) else [options] * len(seeds))
        with learner.compute():
            episodes, rstats = self.collector.collect(seeds, temperature=cfg.rollout.temperature,
                                                      sample_seed=cfg.seed * 7919 + step * 131 + 7 * mine.start,
                                                      options=options)
        # R3: the experts the engine chose for every token (before any later sync changes it)
        self.step_routes = self._routes(episodes) if cfg.rollout.routing_replay else None
        return episodes, groups, rstats, options

    def _finish(self, step: int, trajs: list[Episode], groups: list[int], rstats: Any,
                options: Any) -> tuple[list[Episode], list[int], dict[str, Any]]:
        """The usable episodes of a collection (lost ones dropped and counted), each with its
        policy version(s), saved; the step's rollout metrics."""

        cfg, ranks = self.cfg, self.learner.ranks
        mine = ranks.tasks(cfg.rollout.tasks_per_step)
        keep = ranks.rows(len(trajs))  # ranks of one engine split its episodes
        trajs, groups = trajs[keep.start:keep.stop], [mine.start + g for g in groups[keep.start:keep.stop]]
        levels = ([o[cfg.curriculum.option] for o, t in zip(options[keep.start:keep.stop], trajs)
                   if t.failed is None] if self.curriculum.enabled else [])
        trajs, groups, failed = drop_failed(trajs, groups)  # episodes lost with a Ray worker
        trajs, groups, infra = drop_infra(trajs, groups)  # lost to a dead sandbox / server / engine: no outcome
        k = cfg.rollout.max_staleness
        stale: list[int] = []
        if cfg.rollout.mode == "async":  # versions recorded per token at sampling (rollout/staleness.py)
            stale = stale_episodes(trajs, step, k)  # never produced by construction: the guard
            trajs = [t for i, t in enumerate(trajs) if i not in stale]
            groups = [g for i, g in enumerate(groups) if i not in stale]
            for t in trajs:  # the oldest weights that sampled a token of it
                t.policy_version = min((v for v in t.versions or [] if v >= 0), default=self.version)
        else:
            for t in trajs:
                t.policy_version = self.version
                stamp_versions(t, self.version)
        overlap = self.held.overlap([t.traj for t in trajs], f"step {step + 1}")
        everyone: list[Episode] = ranks.gather(trajs)
        if cfg.log.save_trajectories and ranks.main:
            from agentgym.trajectory import write_jsonl

            write_jsonl(f"{cfg.log.run_dir}/trajectories.jsonl", [e.record() for e in everyone], append=True)
        metrics: dict[str, Any] = episode_stats([e.traj for e in everyone])
        if cfg.rollout.mode == "async":
            metrics.update(staleness_metrics(everyone, step, k), async_dropped_stale=len(stale))
        metrics.update(episodes_used=float(len(everyone)), gen_s=rstats.gen_seconds, env_s=rstats.env_seconds,
                       episodes_failed=ranks.sum(failed), episodes_infra=ranks.sum(infra),
                       held_out_overlap=ranks.sum(overlap),
                       overlong_frac=sum(1 for t in everyone if self.cut(t.traj)) / max(len(everyone), 1))
        if isinstance(self.collector, RayCollector):  # its workers' deaths and retries, since this process started
            metrics.update({f"ray_{k}": getattr(self.collector.total, k) for k in FAULT_COUNTS})
        if self.curriculum.enabled:  # every rank's episodes, so all ranks keep the same state
            seen = ranks.gather(list(zip(levels, [float(episode_success(t.traj)) for t in trajs])))
            self.curriculum.update(step + 1, [lv for lv, _ in seen], [ok for _, ok in seen])
            metrics.update(self.curriculum.metrics())
        return trajs, groups, metrics

    def batch(self, trajs: list[Episode], groups: list[int], metrics: dict[str, Any]) -> Batch | None:
        """The step's episodes as a batch, after dynamic sampling (``ppo.drop_uniform_groups``;
        None: every group uniform, nothing to learn), with the engine's routes (R3) and without
        policy loss on overlong episodes (``ppo.mask_overlong``; their score still counts in
        the baseline). Adds the dropping's metrics to ``metrics``."""
        cfg = self.cfg
        if cfg.ppo.drop_uniform_groups:
            keep = informative_groups([t.traj for t in trajs], groups)
            metrics["groups_dropped_frac"] = 1 - len({groups[i] for i in keep}) / max(len(set(groups)), 1)
            if not keep:
                metrics["update_skipped"] = 1.0
                return None
            trajs, groups = [trajs[i] for i in keep], [groups[i] for i in keep]
        batch = make_batch(trajs, groups, pad_id=self.learner.pad_id)
        if self.step_routes is not None:  # R3: the engine's experts, aligned with the batch

            batch.routes = batch_routes([self.step_routes[id(t)] for t in trajs], batch.input_ids.shape[1])
        if cfg.ppo.mask_overlong:
            batch.policy_mask[torch.tensor([self.cut(t.traj) for t in trajs])] = 0.0
        return batch

    def cut(self, traj: Any) -> bool:
        """An action of ``traj`` was cut at the token limit (overlong)."""
        return cut_actions(traj, self.cfg.env.max_action_tokens, self.held.stop_ids) > 0

    def _demos(self, step: int) -> list[Episode]:
        """``algo: sft``: oracle demonstrations of as many new train problems as PPO's episodes, of
        the warm start's kind (``sft.options``): continued SFT, the control for "more imitation"."""

        cfg = self.cfg
        if self._demo_env is None:
            self._demo_env = self.make_env(cfg.env.train_split)
        n = cfg.derived()["episodes_per_step"]
        seeds = [cfg.stream(SFT_ARM_SEED_BASE) + step * n + i for i in range(n)]
        options = {**self.train_options(), **cfg.sft.options}  # the warm start's kind of demonstration
        trajs = demonstrations(self._demo_env, find_oracle(cfg.env.id), seeds, options, self.held)
        self.held.overlap(trajs, f"step {step + 1}")
        return [Episode.from_record(t) for t in trajs]  # no log-probs: nothing was sampled

    def _routes(self, trajs: list[Episode]) -> dict[int, Any]:
        """The engine's experts for every token of ``trajs`` (all of this rollout group's episodes:
        a tensor-parallel engine needs the same call on each of its ranks), by episode."""

        engine = self.own_engine  # not the GroupEngine: every rank of a group calls it alike
        with self.learner.compute():
            found = engine_routing(engine, [t.traj.tokens for t in trajs])
        return {id(t): r for t, r in zip(trajs, found, strict=True)}

    # ------------------------------------------------------------------ the end
    def stop_producer(self) -> None:
        """Stop the async producer (after the collection it is in, if any)."""
        if self.producer is not None:
            self.producer.close()
            self.producer = None

    def stop(self) -> None:
        """Stop the producer and close the envs the run's driver opened (held-out probes, the
        demonstrations' env)."""
        self.stop_producer()
        self.held.close()
        if self._demo_env is not None:
            self._demo_env.close()
            self._demo_env = None

    def close(self) -> None:
        self.stop()
        self.collector.close()
        self.eval_collector.close()
        self.engine.close()
