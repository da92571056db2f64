"""Collection on Ray: rollout workers as Ray actors, each running the local :class:`Collector`.

    collector = RayCollector(WorkerSpec(make_env, make_engine, max_new_tokens=96), num_workers=4)
    episodes, stats = collector.collect(seeds, temperature=1.0, sample_seed=7)   # as Collector.collect

The seeds of a call are cut into *units* of ``episodes_per_call`` episodes. Each worker (a Ray
actor holding its own envs and engine) runs one unit at a time with ``Collector.collect``, the
very episode loop of the single-process collector, and sends back its ``Episode`` records (the
env's trajectory with the loop's log-probs, versions and faults beside it), so the records are
the same: unit ``u`` is
sampled with seed ``sample_seed + u * SEED_STRIDE`` whichever worker runs it, and an engine
whose rows depend on their own prompt only gives bit-identical records on any number of workers.

Weights: for engines that live in the worker (``hf``), the driver puts the model's state dict
in Ray's object store once per call and the workers load it when its version changed; a
server engine (``openai-http``) is synced by the driver's own engine as before. In
``rollout.mode: async`` the trainer pushes each policy version after its update instead
(``sync_weights(model, version=...)``), workers load the newest at the start of each unit while
the learner trains, and every sampled token records the version that made it.

**Faults.** A unit is *in flight* from dispatch until its records are back; only in-flight
episodes can be lost. When a worker dies (killed, OOM, node lost) or its env server goes away
(``ServiceError`` inside the worker), the episodes of its unit are

* **retried** on a live worker, at most ``max_attempts`` times in all, when the env is
  *replayable*: its episodes share no state that outlives them, so running one again cannot
  double an effect. ``retry="auto"`` takes an env as replayable when it declares so at
  registration (``Capabilities.replayable``: the built-ins, each episode with a fresh sandbox /
  database / generator) unless one of its ``external_state`` kwargs is set (WebAPI's
  ``server_url`` or ``database_url``); ``agentgym/Remote-v0`` and user envs are not, unless
  listed in ``replayable``; ``"always"`` / ``"never"`` override;
* otherwise **failed**: returned as a record with ``Episode.failed`` (the reason) and no turns,
  and :func:`drop_failed` removes them before the batch is built (masked from training; the
  group baseline uses the surviving samples of the task). As prime-rl does, an episode that
  may have had side effects is never replayed: the driver cannot know whether its last step
  reached the outside world.

Records that came back are never lost. A dead worker is restarted by Ray up to
``max_restarts`` times; past that it is retired and the others carry on. If no worker is left,
the remaining episodes are reported failed (reason ``no live Ray workers``) and the call
returns what it has. A unit running longer than ``call_timeout_s`` gets its worker killed
(counted as a death).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError, PoolStepError, ServiceError, TrainerError
from agentgym.registration import capabilities
from agentgym.trajectory import Trajectory

from ..algo.episode import Episode
from .collector import Collector, RolloutStats, make_prefix_engine
from .engines import make_engine
from .staleness import VersionedEngine

__all__ = ["FAULT_COUNTS", "SEED_STRIDE", "FaultStats", "RayCollector", "WorkerSpec", "drop_failed",
           "replayable"]

log = logging.getLogger(__name__)

SEED_STRIDE = 100_003  # sampling seeds of unit u start at sample_seed + u * SEED_STRIDE
RETRY_MODES = ("auto", "always", "never")


def replayable(env_id: str, env_kwargs: dict[str, Any], mode: str = "auto",
               extra: Sequence[str] = ()) -> bool:
    """May a lost episode of this env be run again? (the rule in the module docstring)"""
    if mode not in RETRY_MODES:
        raise ConfigError(f"retry must be one of {list(RETRY_MODES)}, got {mode!r}")
    if mode != "auto":
        return mode == "always"
    if env_id in extra:
        return True
    return capabilities(env_id).replayable_with(env_kwargs)


@dataclass
class WorkerSpec:
    """What a worker builds in its own process (pickled with cloudpickle: closures are fine)."""

    make_env: Callable[[], Any]
    make_engine: Callable[[Any], Any]  # the worker's model copy (or None) -> an Engine
    max_new_tokens: int
    model: Any = None  # architecture + initial weights for in-worker engines; None for servers
    max_env_threads: int | None = None  # EnvPool threads per worker (default: one per episode)
    threads: int = 0  # torch threads in the worker (0: torch's default)


def _hf_engine(model: Any, *, prefix_cache: bool, pad_id: int, kwargs: dict[str, Any]) -> Any:
    """The worker's ``hf`` engine over its own model copy (as ``Rollouts`` builds the local one)."""

    if prefix_cache:
        return make_prefix_engine(model, pad_id=pad_id, **kwargs)
    return make_engine("hf", model=model, pad_id=pad_id, **kwargs)


def _named_engine(model: Any, *, name: str, kwargs: dict[str, Any]) -> Any:
    """A server engine client (``openai-http``): the server holds the weights."""

    return make_engine(name, **kwargs)


class _Worker:
    """The Ray actor: a Collector over ``episodes_per_call`` envs and its own engine."""

    def __init__(self, spec: WorkerSpec, episodes_per_call: int) -> None:
        import agentgym  # noqa: F401  (registers the environments in this process)

        if spec.threads:
            import torch

            torch.set_num_threads(spec.threads)
        self.model = spec.model
        self.engine = spec.make_engine(self.model)
        self.collector = Collector.from_factory(spec.make_env, episodes_per_call, self.engine,
                                                max_new_tokens=spec.max_new_tokens,
                                                max_workers=spec.max_env_threads)
        self.version = -1

    def pid(self) -> int:
        return os.getpid()

    def run(self, seeds: list[int], temperature: float, sample_seed: int | None,
            options: dict[str, Any] | None, weights: list[Any]) -> tuple[list[Episode], RolloutStats]:
        # weights: [] or [(push id, policy version or None, ObjectRef of a state dict)] (a list, so
        # Ray does not fetch it on every call: only when a new push arrived).
        if weights and weights[0][0] != self.version:
            import ray

            push, version, ref = weights[0]
            self.model.load_state_dict(ray.get(ref))
            if version is not None and not isinstance(self.engine, VersionedEngine):  # async from here on
                self.engine = self.collector.engine = VersionedEngine(self.engine)
            if isinstance(self.engine, VersionedEngine):  # its samples record the policy version
                self.engine.sync_weights(self.model, version=version)
            else:
                self.engine.sync_weights(self.model)
            self.version = push
        return self.collector.collect(seeds, temperature=temperature, sample_seed=sample_seed, options=options)

    def close(self) -> None:
        self.collector.close()
        self.engine.close()


@dataclass
class FaultStats:
    """What went wrong in the last ``collect`` (also summed over the collector's life in ``total``)."""

    worker_deaths: int = 0
    env_failures: int = 0  # units lost to a ServiceError inside a live worker (env server gone)
    retried_episodes: int = 0
    failed_episodes: int = 0
    timeouts: int = 0
    reasons: list[str] = field(default_factory=list)


# FaultStats' counters; the trainer logs their sums over the process's collections (evaluations
# included) with every step as ``ray_<name>`` in metrics.jsonl
FAULT_COUNTS = ("worker_deaths", "env_failures", "retried_episodes", "failed_episodes", "timeouts")


class RayCollector:
    """Collection spread over Ray actors; ``collect`` / ``close`` as :class:`Collector`."""

    def __init__(self, spec: WorkerSpec, *, num_workers: int = 2, episodes_per_call: int = 4,
                 env_id: str = "", env_kwargs: dict[str, Any] | None = None, retry: str = "auto",
                 replayable_envs: Sequence[str] = (), max_attempts: int = 2, max_restarts: int = 3,
                 call_timeout_s: float = 0.0, cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0,
                 address: str | None = None, init_kwargs: dict[str, Any] | None = None,
                 weights_from: Any = None) -> None:
        try:
            import ray
        except ImportError as e:
            raise ConfigError("rollout.backend=ray needs Ray: pip install 'agentgym-suite[scale]'") from e
        for name, v in (("num_workers", num_workers), ("episodes_per_call", episodes_per_call),
                        ("max_attempts", max_attempts)):
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
        if max_restarts < 0 or call_timeout_s < 0:
            raise ConfigError(f"max_restarts and call_timeout_s must be >= 0, got {max_restarts}, {call_timeout_s}")
        self.ray = ray
        if not ray.is_initialized():
            try:
                ray.init(address=address, **{"include_dashboard": False, **(init_kwargs or {})})
            except TypeError as e:  # an argument ray.init does not take
                raise ConfigError(f"rollout.ray.init={init_kwargs}: {e}; expected ray.init arguments "
                                  "(num_cpus, object_store_memory, ...)") from None
        self.spec, self.episodes_per_call = spec, episodes_per_call
        # len() is what an evaluation collects per call (evaluation.collect_fixed): one wave of units
        self.pool = range(num_workers * episodes_per_call)
        if not env_id:
            probe = spec.make_env()
            env_id = probe.unwrapped.env_id
            probe.close()
        self.env_id = env_id
        self.retry = replayable(env_id, env_kwargs or {}, retry, replayable_envs)
        self.max_attempts, self.max_restarts, self.call_timeout_s = max_attempts, max_restarts, call_timeout_s
        # Ray restarts a dead actor by itself (max_restarts); our calls are never retried by Ray
        # (max_task_retries=0): whether an episode may run again is the rule above, not Ray's.
        actor = ray.remote(_Worker).options(  # type: ignore[attr-defined]
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=max_restarts,
            max_task_retries=0, scheduling_strategy="SPREAD")
        # Kept referenced: Ray re-reads the constructor arguments when it restarts an actor.
        self._spec_ref = ray.put(spec)
        self.workers: list[Any] = [actor.remote(self._spec_ref, episodes_per_call) for _ in range(num_workers)]
        self.weights_from = weights_from  # the driver's model: its weights go out with every call
        self.deaths = [0] * num_workers
        self.alive = [True] * num_workers
        self._recovering: set[int] = set()
        self._weights: list[Any] = []
        self._version = 0  # weight pushes so far
        self.versioned = False  # rollout.mode=async: the trainer pushes each policy version itself
        import threading

        self._lock = threading.Lock()  # one collect at a time (async: the producer's and evaluations)
        self.total = FaultStats()
        self.last = FaultStats()
        self._closed = False

    @classmethod
    def from_config(cls, r: Any, make_env: Callable[[], Any], model: Any, pad_id: int, *, env_id: str,
                    env_kwargs: dict[str, Any], max_new_tokens: int, threads: int) -> RayCollector:
        """The trainer's collector for ``rollout.backend: ray``: ``r`` is the run's rollout config
        (``engine``, ``engine_kwargs``, ``prefix_cache``, ``max_workers``, ``ray``); ``make_env``
        makes one of the env ``env_id`` (with ``env_kwargs``) in a worker.

        With the ``hf`` engine each worker gets a CPU copy of ``model`` and the driver's weights
        before every call; with ``openai-http`` the workers are clients of the same server.
        """
        import copy

        if r.engine == "hf":
            import functools

            spec = WorkerSpec(make_env, functools.partial(_hf_engine, prefix_cache=r.prefix_cache, pad_id=pad_id,
                                                          kwargs=dict(r.engine_kwargs)),
                              max_new_tokens=max_new_tokens, model=copy.deepcopy(model).to("cpu"),
                              max_env_threads=r.max_workers, threads=threads)
        elif r.engine == "openai-http":
            import functools

            spec = WorkerSpec(make_env, functools.partial(_named_engine, name=r.engine, kwargs=dict(r.engine_kwargs)),
                              max_new_tokens=max_new_tokens, max_env_threads=r.max_workers, threads=threads)
        else:
            raise ConfigError(f"rollout.backend=ray supports rollout.engine hf or openai-http, got "
                              f"{r.engine!r}; serve vLLM over HTTP and use openai-http")
        ray_cfg = r.ray
        return cls(spec, num_workers=ray_cfg.num_workers, episodes_per_call=ray_cfg.episodes_per_call,
                   env_id=env_id, env_kwargs=dict(env_kwargs), retry=ray_cfg.retry,
                   replayable_envs=ray_cfg.replayable, max_attempts=ray_cfg.max_attempts,
                   max_restarts=ray_cfg.max_restarts, call_timeout_s=ray_cfg.call_timeout_s,
                   cpus_per_worker=ray_cfg.cpus_per_worker, gpus_per_worker=ray_cfg.gpus_per_worker,
                   address=ray_cfg.address, init_kwargs=dict(ray_cfg.init),
                   weights_from=model if spec.model is not None else None)

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any, version: int | None = None) -> None:
        """Send ``model``'s weights to the workers' engines (read at their next unit). With
        ``version`` (``rollout.mode: async``) they are that policy version, which the samples
        record, and from then on ``collect`` no longer pushes weights by itself."""
        if self.spec.model is None:
            return  # a server engine: the driver's engine syncs the server
        state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        self._version += 1
        if version is not None:
            self.versioned = True
        self._weights = [(self._version, version, self.ray.put(state))]

    def worker_pids(self, timeout: float = 120.0) -> list[int | None]:
        """Each worker's process id (waiting for restarting ones); None for retired workers."""
        from ray.exceptions import ActorUnavailableError

        deadline = time.monotonic() + timeout
        pids: list[int | None] = []
        for w, ok in zip(self.workers, self.alive):
            while ok:
                try:
                    pids.append(int(self.ray.get(w.pid.remote())))
                    break
                except ActorUnavailableError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            else:
                pids.append(None)
        return pids

    # ------------------------------------------------------------------ collect
    def collect(self, seeds: Sequence[int], *, temperature: float, sample_seed: int | None,
                options: dict[str, Any] | None = None) -> tuple[list[Episode], RolloutStats]:
        """One record per seed, in order; failed episodes carry ``Episode.failed`` (see drop_failed)."""
        with self._lock:
            return self._collect(seeds, temperature=temperature, sample_seed=sample_seed, options=options)

    def _collect(self, seeds: Sequence[int], *, temperature: float, sample_seed: int | None,
                 options: dict[str, Any] | None = None) -> tuple[list[Episode], RolloutStats]:
        ray = self.ray
        from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

        if self._closed:
            raise TrainerError("this RayCollector is closed")
        if self.weights_from is not None and not self.versioned:
            self.sync_weights(self.weights_from)
        n, per = len(seeds), self.episodes_per_call
        units = [list(range(i, min(i + per, n))) for i in range(0, n, per)]
        pending: deque[tuple[int, list[int]]] = deque(enumerate(units))  # (unit id, episode indices)
        attempts = [0] * n
        out: list[Episode | None] = [None] * n
        stats = RolloutStats(n, 0, 0, 0.0, 0.0)
        faults = FaultStats()
        idle = deque(i for i in range(len(self.workers)) if self.alive[i] and i not in self._recovering)
        in_flight: dict[Any, tuple[int, int, list[int], float]] = {}  # ref -> (worker, unit, idx, t0)

        def lose(unit: int, idx: list[int], reason: str) -> None:
            again = [i for i in idx if self.retry and attempts[i] < self.max_attempts]
            for i in idx:
                if i not in again:
                    out[i] = self._failed(seeds[i], reason)
                    faults.failed_episodes += 1
            if again:
                faults.retried_episodes += len(again)
                pending.appendleft((unit, again))
            faults.reasons.append(reason)
            log.warning("rollout unit %d lost (%s): %d episode(s) retried, %d failed",
                        unit, reason, len(again), len(idx) - len(again))

        # ref of a pid() call -> a worker that died: it gets work again once it answers
        probes: dict[Any, int] = {self.workers[w].pid.remote(): w for w in self._recovering}
        while pending or in_flight:
            while pending and idle:
                w = idle.popleft()
                unit, idx = pending.popleft()
                for i in idx:
                    attempts[i] += 1
                s = None if sample_seed is None else sample_seed + unit * SEED_STRIDE
                ref = self.workers[w].run.remote([seeds[i] for i in idx], temperature, s, options, self._weights)
                in_flight[ref] = (w, unit, idx, time.monotonic())
            if not in_flight and not probes:  # work left but no live worker
                while pending:
                    _, idx = pending.popleft()
                    for i in idx:
                        out[i] = self._failed(seeds[i], "no live Ray workers")
                        faults.failed_episodes += 1
                break
            ready, _ = ray.wait([*in_flight, *probes], num_returns=1,
                                timeout=1.0 if (self.call_timeout_s or probes) else None)
            for ref in ready:
                if ref in probes:  # a restarted worker answers (or is gone for good)
                    w = probes.pop(ref)
                    try:
                        ray.get(ref)
                        idle.append(w)
                    except ActorDiedError:
                        self._retire(w)
                    except RayActorError:  # still restarting: ask again
                        time.sleep(0.2)
                        probes[self.workers[w].pid.remote()] = w
                    continue
                w, unit, idx, _ = in_flight.pop(ref)
                try:
                    episodes, st = ray.get(ref)
                except RayActorError as e:
                    faults.worker_deaths += 1
                    self.deaths[w] += 1
                    lose(unit, idx, f"worker {w} died ({type(e).__name__})")
                    if self.deaths[w] > self.max_restarts:
                        self._retire(w)
                    else:  # no work for it until Ray has restarted it
                        probes[self.workers[w].pid.remote()] = w
                    continue
                except RayTaskError as e:
                    cause = e.cause
                    if isinstance(cause, PoolStepError) and all(
                            isinstance(x, ServiceError) for x in cause.errors.values()):
                        cause = next(iter(cause.errors.values()))  # the pool's envs lost their server
                    if not isinstance(cause, ServiceError):
                        raise  # a bug, not a fault: never masked (the remote traceback is in it)
                    faults.env_failures += 1
                    lose(unit, idx, f"env service failed on worker {w}: {str(cause).splitlines()[0][:200]}")
                else:
                    # Episodes an infrastructure fault ended inside the worker (its Collector keeps
                    # the others) are lost like a unit whose env server failed: retried if replayable.
                    lost = [i for i, ep in zip(idx, episodes) if ep.infra_error]
                    for i, ep in zip(idx, episodes):
                        if i not in lost:
                            out[i] = ep
                    if lost:
                        faults.env_failures += 1
                        note = str(episodes[idx.index(lost[0])].infra_error)
                        lose(unit, lost, f"env service failed on worker {w}: {note.splitlines()[0][:200]}")
                    stats.rounds += st.rounds
                    stats.sampled_tokens += st.sampled_tokens
                    stats.env_seconds += st.env_seconds
                    stats.gen_seconds += st.gen_seconds
                idle.append(w)
            if self.call_timeout_s:
                now = time.monotonic()
                for _ref, (w, _u, _i, t0) in list(in_flight.items()):
                    if now - t0 > self.call_timeout_s:
                        faults.timeouts += 1
                        ray.kill(self.workers[w], no_restart=False)  # its call fails as a death
        self._recovering = set(probes.values())  # still restarting: probed again at the next call
        self.last = faults
        for k in FAULT_COUNTS:
            setattr(self.total, k, getattr(self.total, k) + getattr(faults, k))
        self.total.reasons += faults.reasons
        return [t for t in out if t is not None], stats

    def _retire(self, w: int) -> None:
        self.alive[w] = False
        log.error("Ray rollout worker %d died %d time(s) (max_restarts=%d): retired", w, self.deaths[w],
                  self.max_restarts)

    def _failed(self, seed: int, reason: str) -> Episode:
        return Episode(Trajectory(env_id=self.env_id, seed=seed, task_id="", tokenizer=""), [], failed=reason)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w, ok in zip(self.workers, self.alive):
            if ok:
                try:
                    self.ray.get(w.close.remote(), timeout=30)
                except Exception:
                    pass
            self.ray.kill(w)


def drop_failed(episodes: Sequence[Episode], groups: Sequence[int]) -> tuple[list[Episode], list[int], int]:
    """The episodes a batch may use: failed ones (``Episode.failed``) are masked out; returns
    (episodes, their group ids, how many were dropped). A task left with one sample keeps
    it: its group advantage is then zero, which is the honest value with no baseline."""
    keep = [i for i, e in enumerate(episodes) if e.failed is None]
    if not keep and episodes:
        raise TrainerError(f"all {len(episodes)} episodes of this step failed in collection: "
                           f"{episodes[0].failed}; check the Ray workers and env servers")
    return [episodes[i] for i in keep], [groups[i] for i in keep], len(episodes) - len(keep)
