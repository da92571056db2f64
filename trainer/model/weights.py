"""The policy's weights as a stream of ``(name, tensor)``: for engines, checkpoints and exports.

A plain model yields its state dict; a sharded one (FSDP2, :class:`GatheredWeights`) yields
each parameter all-gathered on the fly, so no rank ever holds the whole model twice. Every
consumer works one tensor (or one bucket of tensors) at a time:

* :func:`named_tensors`: ``(name, tensor)`` in a dtype, in state-dict order (under torchrun
  every rank must consume the stream completely and in the same order: each item is a
  collective);
* :func:`buckets`: groups of consecutive tensors of at most ``max_bytes`` (what an engine's
  weight sync loads per call);
* :func:`write_safetensors`: one ``model.safetensors`` written tensor by tensor (the header
  is computed from shapes and dtypes first), by one rank; memory stays at one tensor.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..distributed import GatheredWeights

__all__ = ["SAFETENSORS_DTYPES", "buckets", "named_tensors", "tensor_bytes", "write_safetensors"]

SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


def _state(source: Any) -> Mapping[str, torch.Tensor]:
    """The mapping to stream: ``GatheredWeights.state_dict()`` gathers lazily; a module's is its own."""
    return source.state_dict()  # type: ignore[no-any-return]


def _cast(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    t = t.detach()
    return t.to(dtype) if dtype is not None and t.is_floating_point() else t


def named_tensors(source: nn.Module | Any, dtype: torch.dtype | None = None,
                  skip: Iterable[str] = ()) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` of a module or a :class:`~agentgym.trainer.distributed.GatheredWeights`,
    floating-point tensors cast to ``dtype``; names in ``skip`` are left out (tied weights)."""
    left_out = set(skip)
    sd = _state(source)
    for name in sd:
        if name not in left_out:
            yield name, _cast(sd[name], dtype)


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def buckets(items: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive ``(name, tensor)`` in lists of at most ``max_bytes`` (a larger tensor alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in items:
        n = tensor_bytes(t)
        if bucket and size + n > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket


def _spec(t: Any, dtype: torch.dtype | None) -> tuple[str, list[int], int]:
    """(safetensors dtype, shape, bytes) of ``t`` once cast, from metadata only (DTensors: global)."""
    dt = dtype if dtype is not None and t.is_floating_point() else t.dtype
    shape = [int(s) for s in t.shape]
    numel = 1
    for s in shape:
        numel *= s
    return SAFETENSORS_DTYPES[dt], shape, numel * torch.empty((), dtype=dt).element_size()


def write_safetensors(source: nn.Module | Any, path: str | Path, *, dtype: torch.dtype | None = None,
                      skip: Iterable[str] = (), writer: bool = True) -> int:
    """Write ``source``'s tensors (cast to ``dtype``) to the safetensors file ``path``, one at a
    time; returns the bytes of tensor data. Sharded sources: every rank calls this (each
    tensor is gathered collectively); only the rank with ``writer=True`` writes. A write error
    is raised once the stream has been consumed, so that no rank is left in a collective."""
    left_out = set(skip)

    # metadata only: a sharded module's state dict holds DTensors with their global shapes
    shapes = (source.model if isinstance(source, GatheredWeights) else source).state_dict()
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in shapes:
        if name in left_out:
            continue
        code, shape, n = _spec(shapes[name], dtype)
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    error: OSError | None = None
    f = None
    try:
        if writer:
            f = open(path, "wb")
            f.write(struct.pack("<Q", len(raw)) + raw)
    except OSError as e:
        error = e
    for name, t in named_tensors(source, dtype, left_out):
        if f is None or error is not None:
            continue
        data = t.contiguous().cpu()
        expected = header[name]["data_offsets"]
        if tensor_bytes(data) != expected[1] - expected[0]:
            raise ValueError(f"{name}: {tensor_bytes(data)} bytes, the header says {expected}")
        try:
            buf: Any = data.reshape(-1).view(torch.uint8).numpy()
            f.write(buf)  # the buffer itself, no copy
        except OSError as e:
            error = e
    if f is not None:
        f.close()
    if error is not None:
        raise error
    return offset
