"""Asynchronous rollouts with bounded staleness (``rollout.mode: async``).

    engine = VersionedEngine(engine)                  # stamps every sample with its weights' version
    producer = Producer(collect_step, version=lambda: trainer.engine_version, start=0, end=steps,
                        max_staleness=k)
    n, batch = producer.take(0)                       # the learner waits here, then updates
    engine.sync_weights(model, version=1); producer.notify()

The producer (a thread) collects whole steps' batches in order: step n's episodes start only
once the engine holds policy version >= n - k, and every version only grows, so no token of
step n's batch is more than k versions older than the learner that trains on it (n updates
done). Older tokens are therefore never produced; :func:`stale_episodes` is the guard that
would drop (and count) any that slipped through.

Partial rollouts: the learner pushes its weights after every update, between two of the
engine's batched ``generate`` calls (the wrapper's lock keeps a sync from landing inside one),
so an episode in flight continues its next turn with the new weights. Each sampled token keeps
the version that produced it: ``Episode.versions`` (one int per token, ``NO_VERSION`` where the
env wrote the token; the collector fills it from ``sample.meta["policy_version"]``), saved with
the episode as ``meta["token_versions"]`` (``Episode.record``). The behaviour log-probs stay the
engine's own, from generation time (``Episode.logprobs``), and rollout correction weighs them
against the learner. The producer hands over the collection as it came: ``Episode`` records.

Generation overlaps the update when the engine computes outside the learner's thread: its
own process (a server, vLLM) or a weight copy in this process (``engine_weights: copy``;
torch releases the GIL inside its kernels).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agentgym.errors import TrainerError

from ..algo.episode import NO_VERSION, Episode
from .engines.base import EngineAbilities, engine_abilities

__all__ = ["Producer", "VersionedEngine", "stale_episodes", "stamp_versions", "staleness_metrics",
           "token_staleness"]



class VersionedEngine:
    """An engine whose samples carry the policy version of the weights that made them
    (``sample.meta["policy_version"]``). ``generate`` and ``sync_weights`` exclude each other,
    so a batched call runs on one version from start to end. Other attributes pass through."""

    def __init__(self, inner: Any, version: int = 0) -> None:
        self.inner = inner
        self.version = version
        self._lock = threading.Lock()

    def generate(self, prompts: list[list[int]], **kw: Any) -> list[Any]:
        with self._lock:
            v = self.version
            out = self.inner.generate(prompts, **kw)
        for s in out:
            s.meta["policy_version"] = v
        return list(out)

    @property
    def abilities(self) -> EngineAbilities:
        """The inner engine's."""
        return engine_abilities(self.inner)

    def sync_weights(self, model: Any, version: int | None = None) -> None:
        """Load ``model``'s weights; they are ``version`` (default: one more than before)."""
        with self._lock:
            self.inner.sync_weights(model)
            self.version = self.version + 1 if version is None else int(version)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy / unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)


def stamp_versions(episode: Episode, version: int) -> None:
    """Every sampled token of ``episode`` made by ``version`` (a synchronous step: one version)."""
    episode.versions = [version if m else NO_VERSION for m in episode.traj.policy_mask]


def token_staleness(episode: Episode, step: int) -> list[int]:
    """Staleness (``step`` - version) of each sampled token of ``episode`` that has a version."""
    return [step - v for v in episode.versions or [] if v != NO_VERSION]


def stale_episodes(episodes: Sequence[Episode], step: int, max_staleness: int) -> list[int]:
    """Indices of episodes holding a token more than ``max_staleness`` versions old at ``step``."""
    return [i for i, e in enumerate(episodes) if any(s > max_staleness for s in token_staleness(e, step))]


def staleness_metrics(episodes: Sequence[Episode], step: int, max_staleness: int) -> dict[str, float]:
    """The step's staleness histogram over sampled tokens (``staleness_frac_j``: share of tokens
    j versions old, j = 0..k), its mean and max, and ``episodes_partial`` (episodes whose tokens
    come from more than one version: in flight across a weight update)."""
    counts = [0] * (max_staleness + 1)
    total = partial = 0
    worst = 0
    for e in episodes:
        st = token_staleness(e, step)
        if len(set(st)) > 1:
            partial += 1
        for s in st:
            counts[min(max(s, 0), max_staleness)] += 1
            worst = max(worst, s)
        total += len(st)
    out = {f"staleness_frac_{j}": c / max(total, 1) for j, c in enumerate(counts)}
    out.update(staleness_mean=sum(j * c for j, c in enumerate(counts)) / max(total, 1),
               staleness_max=float(worst), episodes_partial=float(partial))
    return out


class Producer:
    """Collects the batches of steps ``start .. end-1`` on a thread (module doc).

    ``collect(n)`` returns step n's raw collection (its ``Episode`` records and what goes with
    them); it runs only once ``version() >= n - max_staleness``. :meth:`take` hands the learner step n's result (re-raising an error of the
    producer), :meth:`notify` wakes the producer after a weight sync.
    """

    def __init__(self, collect: Callable[[int], Any], *, version: Callable[[], int], start: int, end: int,
                 max_staleness: int) -> None:
        self._collect, self._version = collect, version
        self.k = max_staleness
        self._cond = threading.Condition()
        self._stop = False
        self._queue: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()
        self.waited_for_version = 0.0  # seconds the producer was held back by the bound
        self._threads = torch.get_num_threads()  # OpenMP's thread count is per thread: carried over
        self._thread = threading.Thread(target=self._run, args=(start, end), name="agentgym-producer", daemon=True)
        self._thread.start()

    def _run(self, start: int, end: int) -> None:
        import time

        torch.set_num_threads(self._threads)
        for n in range(start, end):
            t0 = time.perf_counter()
            with self._cond:
                while not self._stop and self._version() < n - self.k:
                    self._cond.wait(timeout=1.0)
                if self._stop:
                    return
            self.waited_for_version += time.perf_counter() - t0
            try:
                self._queue.put((n, self._collect(n), None))
            except BaseException as e:  # handed to the learner, which raises it
                self._queue.put((n, None, e))
                return

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def take(self, step: int, timeout: float | None = None) -> Any:
        """Step ``step``'s collection (waits for it)."""
        try:
            n, out, err = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TrainerError(f"no batch for step {step} after {timeout} s: the rollout producer is stuck "
                               "(an engine or env server that does not answer?)") from None
        if err is not None:
            raise err
        if n != step:
            raise TrainerError(f"the rollout producer delivered step {n}'s batch when step {step} was due; "
                               "rollout.mode=async trains the steps in order from where the producer started")
        return out

    def close(self, timeout: float = 30.0) -> None:
        """Stop producing; waits for a collection in progress to end (at most ``timeout`` s)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
