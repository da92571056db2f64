"""The learner across processes: ``torchrun`` + FSDP2 (``fully_shard``), data parallel.

    torchrun --nproc_per_node 8 -m agentgym.trainer.cli --config gptoss-20b-8gpu-vllm

Under ``torchrun`` (``WORLD_SIZE`` in the environment) every rank:

* holds a shard of the policy's float32 master weights, gradients and AdamW state
  (:func:`shard_policy`: one FSDP unit per decoder layer plus the root; compute in
  ``model.dtype`` through FSDP2's ``MixedPrecisionPolicy``, gradients reduced in float32);
* collects the episodes of its *rollout group*: ``world / rollout_tp`` groups of
  ``rollout_tp`` ranks, each group one engine (``rollout_tp = 1``: one engine per rank; more:
  one tensor-parallel engine per group, every rank of a group collecting the same episodes,
  as vLLM's ``external_launcher`` runs them) and keeps its share of the group's rows
  (:func:`group_tasks`, :func:`tp_rows`);
* learns on its rows; losses are normalised by the policy-token count of all ranks together
  (:func:`all_reduce_sum`) and multiplied by the world size, because FSDP averages the
  gradients across ranks: the update is the one a single process would make on all rows.

Full weights are only ever materialised one parameter at a time (:class:`GatheredWeights`,
used to sync engines) or on rank 0 (saving a model, loading one: rank 0 reads, the others
receive their shards by broadcast, :func:`load_full_state`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from agentgym.errors import ConfigError

__all__ = ["DistInfo", "GatheredWeights", "Layout", "Ranks", "all_gather_objects", "all_gather_rows",
           "all_reduce_sum", "barrier", "full_state_dict", "global_rank", "group_tasks", "init_distributed",
           "is_sharded", "layout_problems", "load_full_state", "shutdown", "tp_rows"]


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: rank, world size, device and its rollout group."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    rollout_tp: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def group(self) -> int:  # this rank's rollout group (one engine)
        return self.rank // self.rollout_tp

    @property
    def groups(self) -> int:
        return self.world // self.rollout_tp

    @property
    def tp_rank(self) -> int:  # position inside the rollout group
        return self.rank % self.rollout_tp


def launched_by_torchrun() -> bool:
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


# ---------------------------------------------------------------------------- the layout rules

@dataclass(frozen=True)
class Layout:
    """What the process-layout rules read from a run's config (:meth:`of`); the world size is
    given apart: the dry run plans for ``distributed.nproc``, a real start has torchrun's."""

    rollout_tp: int = 1
    backend: str = "auto"
    device: str = "cpu"
    tasks_per_step: int = 1
    samples_per_task: int = 1
    minibatches: int = 1
    lora_rank: int = 0
    nproc: int = 0  # the processes the recipe is written for (0: any)

    @classmethod
    def of(cls, cfg: Any) -> Layout:
        """The layout of a ``TrainConfig``."""
        d, r = cfg.distributed, cfg.rollout
        return cls(rollout_tp=d.rollout_tp, backend=d.backend, device=cfg.model.device,
                   tasks_per_step=r.tasks_per_step, samples_per_task=r.samples_per_task,
                   minibatches=cfg.ppo.minibatches, lora_rank=cfg.model.lora.rank, nproc=d.nproc)


def _tp_problem(rollout_tp: int, world: int) -> str | None:
    if rollout_tp < 1 or world % rollout_tp:
        return (f"distributed.rollout_tp={rollout_tp} does not divide the {world} processes (one rollout "
                "engine per group of rollout_tp ranks); set it to a divisor of distributed.nproc")
    return None


def _tasks_problem(tasks: int, groups: int) -> str | None:
    if tasks % groups:
        return (f"rollout.tasks_per_step={tasks} is not a multiple of the {groups} rollout engines "
                "(world / distributed.rollout_tp); each engine collects an equal share of the tasks")
    return None


def _rows_problem(rows: int, rollout_tp: int) -> str | None:
    if rows % rollout_tp:
        return (f"{rows} episodes per engine do not split over its {rollout_tp} ranks "
                "(distributed.rollout_tp); make rollout.tasks_per_step x rollout.samples_per_task a multiple")
    return None


def _minibatch_problem(minibatches: int, episodes: int) -> str | None:
    """``ppo.minibatches`` against the ``episodes`` one rank learns on per step (all of them in
    one process): a minibatch needs at least one episode."""
    if minibatches > episodes:
        return (f"ppo.minibatches={minibatches} exceeds the {episodes} episodes each rank learns on per "
                "step; lower it, or collect more episodes per step")
    return None


def layout_problems(layout: Layout, world: int) -> list[str]:
    """The process-layout rules, one message each (empty: consistent). The dry run
    (``plan.make_plan``) lists them; a real start (:func:`init_distributed`) refuses them.

    The world is the recipe's ``distributed.nproc`` (when set); LoRA trains in one process; ``rollout_tp`` divides the world into ``world / rollout_tp``
    engines; ``tasks_per_step`` splits evenly over the engines, each engine's episodes over its
    ranks, and every rank's episodes over ``ppo.minibatches``; gloo cannot carry CUDA tensors."""
    problems: list[str] = []
    if layout.nproc and layout.nproc != world:
        problems.append(f"distributed.nproc={layout.nproc} but {world} processes were started; run torchrun "
                        f"--nproc_per_node {layout.nproc}, or set distributed.nproc={world}")
    if layout.lora_rank and world > 1:
        problems.append(f"model.lora.rank={layout.lora_rank} runs in one process, not {world}; set "
                        "distributed.nproc=1 and run without torchrun (or model.lora.rank=0)")
    episodes = layout.tasks_per_step * layout.samples_per_task
    tp = _tp_problem(layout.rollout_tp, world)
    groups = world // layout.rollout_tp if tp is None else 0
    rule = tp or _tasks_problem(layout.tasks_per_step, groups) or _rows_problem(episodes // groups, layout.rollout_tp) \
        or _minibatch_problem(layout.minibatches, episodes // world)
    if rule:
        problems.append(rule)
    if world > 1 and layout.device == "cuda" and layout.backend == "gloo":
        problems.append("distributed.backend=gloo on CUDA: gloo does not carry CUDA tensors; use nccl (or auto)")
    return problems


def init_distributed(layout: Layout, *, timeout_s: float = 1800) -> DistInfo | None:
    """Join the process group ``torchrun`` set up (None when not launched by torchrun), after
    checking ``layout`` against torchrun's world size (:func:`layout_problems`: a ConfigError).

    ``device`` ``cuda`` binds rank r to ``cuda:LOCAL_RANK``; ``backend`` ``auto`` is nccl on
    CUDA and gloo on CPU.
    """
    if not launched_by_torchrun():
        return None
    import torch.distributed as dist

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    problems = layout_problems(layout, world)
    if problems:
        raise ConfigError(f"the process layout does not fit the {world} processes torchrun started: "
                          + "; ".join(problems))
    backend, rollout_tp = layout.backend, layout.rollout_tp
    dev = torch.device(layout.device)
    if dev.type == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    if backend == "auto":
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return DistInfo(rank=rank, world=world, local_rank=local, device=dev, rollout_tp=rollout_tp)


def shutdown() -> None:
    """Leave the process group (end of a torchrun run); nothing to do otherwise.

    Call it once the sharded models are no longer referenced: their last garbage (DTensor shards,
    their mesh, finished collectives) is collected here, while the group is still alive. Left to
    the interpreter's exit, gloo's threads were torn down after the group and a finished run
    aborted in ~5% of 2-rank runs ("terminate called without an active exception", SIGABRT)."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def is_sharded(module: nn.Module | None) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


# ---------------------------------------------------------------------------- building

def full_state_dict(model: nn.Module, *, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The full state dict on CPU, on rank 0 only (an empty dict elsewhere); unsharded models
    give theirs directly. ``dtype`` casts floating-point tensors."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd: dict[str, Any] = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if dtype is not None:
        sd = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
    return sd


def load_full_state(model: nn.Module, state: Mapping[str, torch.Tensor], *, strict: bool = True) -> None:
    """Load a full state dict that only rank 0 needs to hold (others pass ``{}``) into a
    sharded model: rank 0's tensors are broadcast and each rank keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(state), options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True, strict=strict))


class GatheredWeights:
    """What ``Engine.sync_weights`` reads from a sharded policy: ``state_dict()`` yields the
    full parameters one at a time (all-gathered on the fly, cast to ``dtype``), so no rank ever
    holds the whole model twice. Every rank must iterate it completely and in the same order
    (each item is a collective); engines do (``load_state_dict`` / ``load_weights``)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype

    def state_dict(self) -> Mapping[str, torch.Tensor]:
        return _LazyFull(self.model, self.dtype)


class _LazyFull(Mapping[str, torch.Tensor]):
    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        self._sd = model.state_dict()  # DTensor shards, canonical names
        self._dtype = dtype

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._sd[key]
        full = t.full_tensor() if hasattr(t, "full_tensor") else t
        return full.detach().to(self._dtype) if full.is_floating_point() else full.detach()

    def __iter__(self) -> Iterator[str]:
        return iter(self._sd)

    def __len__(self) -> int:
        return len(self._sd)


# ---------------------------------------------------------------------------- collectives

def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def global_rank() -> int:
    """This process's rank in the initialised process group; 0 when there is none (one process)."""
    d = _dist()
    return 0 if d is None else int(d.get_rank())


def barrier() -> None:
    d = _dist()
    if d is not None:
        d.barrier()


def all_reduce_sum(x: float) -> float:
    d = _dist()
    if d is None:
        return float(x)
    t = torch.tensor([float(x)], dtype=torch.float64)
    d.all_reduce(t)
    return float(t.item())


def all_gather_objects(obj: Any) -> list[Any]:
    d = _dist()
    if d is None:
        return [obj]
    out: list[Any] = [None] * d.get_world_size()
    d.all_gather_object(out, obj)
    return out


def all_gather_rows(t: torch.Tensor) -> torch.Tensor:
    """Rows of every rank, concatenated in rank order (dim 1 right-padded with zeros)."""
    parts = all_gather_objects(t.detach().cpu())
    if len(parts) == 1:
        return t
    width = max(p.shape[1] for p in parts) if t.dim() > 1 else 0
    if t.dim() > 1:
        parts = [torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts]
    return torch.cat(parts).to(t.device)


# ---------------------------------------------------------------------------- work split

def group_tasks(n_tasks: int, info: DistInfo | None) -> range:
    """Task indices (of one step's ``n_tasks``) that this rank's rollout group collects."""
    if info is None:
        return range(n_tasks)
    if (problem := _tasks_problem(n_tasks, info.groups)) is not None:
        raise ConfigError(problem)
    per = n_tasks // info.groups
    return range(info.group * per, (info.group + 1) * per)


def tp_rows(n_rows: int, info: DistInfo | None) -> range:
    """Rows (of the episodes a rollout group collected) that this rank learns on: the ranks
    of a tensor-parallel group all hold the same episodes and split them."""
    if info is None or info.rollout_tp == 1:
        return range(n_rows)
    if (problem := _rows_problem(n_rows, info.rollout_tp)) is not None:
        raise ConfigError(problem)
    per = n_rows // info.rollout_tp
    return range(info.tp_rank * per, (info.tp_rank + 1) * per)


def rows_before(n_local: int) -> int:
    """How many rows the ranks before this one hold (its offset in rank-ordered gathers)."""
    d = _dist()
    if d is None:
        return 0
    counts: list[Any] = [None] * d.get_world_size()
    d.all_gather_object(counts, n_local)
    return sum(int(x) for x in counts[: d.get_rank()])


class Ranks:
    """The one object the training step asks about the other processes. In one process
    (``info`` None) every call is the identity: one rank, which is the main one."""

    def __init__(self, info: DistInfo | None) -> None:
        self.info = info

    @property
    def main(self) -> bool:
        return self.info is None or self.info.is_main

    @property
    def world(self) -> int:
        return 1 if self.info is None else self.info.world

    @property
    def groups(self) -> int:  # rollout groups (engines)
        return 1 if self.info is None else self.info.groups

    @property
    def tp_follower(self) -> bool:  # holds the same episodes as its rollout group's first rank
        return self.info is not None and self.info.tp_rank > 0

    def sum(self, x: float) -> float:
        return all_reduce_sum(x)

    def gather(self, items: list[Any]) -> list[Any]:
        """Every rank's ``items``, concatenated in rank order."""
        return [x for part in all_gather_objects(items) for x in part]

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        return all_gather_rows(t)

    def rows_before(self, n_local: int) -> int:
        return rows_before(n_local) if self.world > 1 else 0

    def tasks(self, n_tasks: int) -> range:
        return group_tasks(n_tasks, self.info)

    def rows(self, n_rows: int) -> range:
        return tp_rows(n_rows, self.info)

    def share(self, n: int) -> range:
        """This rank's rollout group's part of ``n`` items (contiguous, sizes differ by at most 1)."""
        if self.info is None:
            return range(n)
        lo, hi = n * self.info.group // self.info.groups, n * (self.info.group + 1) // self.info.groups
        return range(lo, hi)

    def barrier(self) -> None:
        barrier()
