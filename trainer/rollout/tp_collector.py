"""Collection by a tensor-parallel engine inside torchrun: envs on one rank, the engine on all.

Under torchrun with ``distributed.rollout_tp = tp > 1`` the ranks ``g*tp .. g*tp+tp-1`` share
one vLLM engine (``external_launcher``): each rank holds a slice of it, and every call
(generate, routing) must be made by all of them at once with identical inputs, or the engine
hangs or diverges. So the environments live on the group's first rank only (the *leader*):

* the leader runs the ordinary :class:`~agentgym.trainer.rollout.collector.Collector` with a
  :class:`GroupEngine`, which broadcasts each call (method, prompts, seeds) to the group's other
  ranks before making it itself;
* the others (*followers*) run :meth:`GroupEngine.follow`: receive a call, make it on their
  slice of the engine, until the leader says the collection is over;
* the leader then broadcasts the collection (``Episode`` records, as ``Collector.collect``
  returns them), so every rank of the group holds the same episodes (``distributed.tp_rows`` then splits them for learning).

Environments are stepped once per group, not once per rank: non-deterministic envs cannot
diverge between ranks, and sandboxes or servers are started once. Messages go over a gloo
group per engine (CPU objects, also when the learner uses NCCL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..distributed import DistInfo
from .engines.base import EngineAbilities, engine_abilities

__all__ = ["GroupCollector", "GroupEngine", "tp_group"]

_DONE = "__agentgym_done__"
_GROUPS: dict[tuple[int, ...], Any] = {}


def tp_group(info: DistInfo) -> tuple[Any, int]:
    """(gloo process group of this rank's engine, global rank of its leader). Every rank creates
    every group, in the same order (``new_group`` is collective over the whole job)."""
    import torch.distributed as dist

    for g in range(info.groups):
        ranks = tuple(range(g * info.rollout_tp, (g + 1) * info.rollout_tp))
        if ranks not in _GROUPS:
            _GROUPS[ranks] = dist.new_group(list(ranks), backend="gloo")
    mine = tuple(range(info.group * info.rollout_tp, (info.group + 1) * info.rollout_tp))
    return _GROUPS[mine], mine[0]


def _broadcast(obj: Any, group: Any, src: int) -> Any:
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


class GroupEngine:
    """An engine shared by the ranks of one tensor-parallel group (module doc).

    With ``mirror`` (vLLM's ``external_launcher``: each rank holds a slice of one engine) the
    calls that run the model (``generate``, ``routing``) are mirrored: the leader broadcasts
    them, the followers replay them in :meth:`follow`. Without (an engine per rank, e.g. ``hf``)
    only the leader samples. Weight sync, sleep and wake are made by every rank itself (the
    trainer calls them on all ranks), so they pass straight through.
    """

    MIRRORED = ("generate", "routing")

    def __init__(self, inner: Any, info: DistInfo, *, mirror: bool = True) -> None:
        self.inner, self.info, self.mirror = inner, info, mirror
        self.group, self.leader = tp_group(info)
        self.is_leader = info.tp_rank == 0

    @property
    def abilities(self) -> EngineAbilities:
        """The inner engine's: ``routing`` only where the inner engine reports it."""
        return engine_abilities(self.inner)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if not self.is_leader:
            raise RuntimeError(f"{method} called on a follower rank; followers run GroupEngine.follow()")
        if self.mirror:
            _broadcast((method, args, kwargs), self.group, self.leader)
        return getattr(self.inner, method)(*args, **kwargs)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 stop_ids: Sequence[int], seed: int | None = None) -> Any:
        return self._call("generate", prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                          stop_ids=list(stop_ids), seed=seed)

    def routing(self, sequences: list[list[int]]) -> Any:
        return self._call("routing", sequences)

    def release(self) -> None:
        """Leader: tell the followers that this collection is over."""
        _broadcast((_DONE, (), {}), self.group, self.leader)

    def follow(self) -> int:
        """Follower: make the leader's calls on this rank's slice of the engine until it
        releases the group; returns the number of calls made."""
        calls = 0
        while True:
            method, args, kwargs = _broadcast(None, self.group, self.leader)
            if method == _DONE:
                return calls
            if method not in self.MIRRORED:
                raise RuntimeError(f"unexpected mirrored call {method!r}")
            getattr(self.inner, method)(*args, **kwargs)
            calls += 1

    def __getattr__(self, name: str) -> Any:  # sync_weights, sleep, wake_up, close, last_sync, ...
        return getattr(self.inner, name)


class GroupCollector:
    """``Collector.collect`` for a tensor-parallel group: the leader collects with its envs (its
    ``collector`` uses the :class:`GroupEngine`), the followers mirror the engine calls; every
    rank returns the leader's ``Episode`` records and stats. ``size``: episodes per collection (the
    leader's pool size; followers have no envs)."""

    def __init__(self, collector: Any | None, engine: GroupEngine, size: int) -> None:
        self.collector, self.engine, self.size = collector, engine, size
        self.pool = collector.pool if collector is not None else range(size)  # len() for collect_fixed

    def collect(self, seeds: Sequence[int], **kwargs: Any) -> tuple[Any, Any]:
        from agentgym.errors import TrainerError

        out: tuple[str, Any] = ("ok", None)
        error: BaseException | None = None
        if self.engine.is_leader:
            assert self.collector is not None
            try:
                out = ("ok", self.collector.collect(seeds, **kwargs))
            except Exception as e:  # the followers must not wait for episodes that never come
                out, error = ("error", f"{type(e).__name__}: {e}"), e
            finally:
                self.engine.release()
        else:
            self.engine.follow()
        status, result = _broadcast(out, self.engine.group, self.engine.leader)
        if status == "error":
            if error is not None:
                raise error
            raise TrainerError(f"the leader of this rollout group (rank {self.engine.leader}) failed to "
                               f"collect: {result}")
        return result  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.collector is not None:
            self.collector.close()
