"""Bytes of live tensors, measured: what the memory plan (``plan.py``) is checked against.

    with LiveBytes() as live:          # tracks every storage an op creates inside the block
        live.track(model.parameters())  # and storages made before it (weights, optimizer state)
        step()
    live.peak, live.now                 # bytes

A ``TorchDispatchMode`` sees the output of every tensor operation; each new storage is counted
until it is freed (a ``weakref.finalize`` on the storage, whose Python object torch keeps one
per storage), so tensors kept for the backward pass, gradients and optimizer state count for as
long as they live, views and in-place results do not count twice. What it does not see:
temporaries inside a single kernel, allocator caching and fragmentation (a GPU's
``max_memory_allocated`` can be a few percent higher).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LiveBytes"]


class LiveBytes(TorchDispatchMode):
    """Live tensor bytes (all devices together) and their peak, inside the ``with`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.peak = 0
        self._seen: set[int] = set()  # ids of the storages counted (alive)
        self.marks: dict[str, int] = {}

    def _add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        st = t.untyped_storage()
        key = id(st)
        if key in self._seen:
            return
        n = st.nbytes()
        self._seen.add(key)
        self.now += n
        self.peak = max(self.peak, self.now)
        weakref.finalize(st, self._free, key, n)

    def _free(self, key: int, n: int) -> None:
        self._seen.discard(key)
        self.now -= n

    def track(self, tensors: Iterable[Any]) -> None:
        """Count tensors made outside the block (parameters, optimizer state) while they live."""
        for t in tensors:
            self._add(t)

    def mark(self, name: str) -> None:
        """Remember the current peak under ``name`` and start a new one from the current bytes."""
        self.marks[name] = self.peak
        self.peak = self.now

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self._add(t)
        return out
