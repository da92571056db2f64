"""Sink-aware attention with forward *and* backward, for training GPT-OSS on GPU.

GPT-OSS attention adds one learned logit ``s_h`` per head to every softmax denominator::

    P_ij = exp(S_ij) / (sum_j' exp(S_ij') + exp(s_h))

Any kernel that returns the plain attention output ``O_i = sum_j softmax(S_i)_j V_j`` and the
log-sum-exp ``LSE_i = log sum_j exp(S_ij)`` (without the sink) gives the sink attention
exactly, because only the denominator changes::

    O_sink_i = sum_j exp(S_ij) V_j / (exp(LSE_i) + exp(s_h))
             = O_i * exp(LSE_i) / (exp(LSE_i) + exp(s_h))
             = O_i * sigmoid(LSE_i - s_h)

Autograd through ``sigmoid(LSE - s)`` reproduces the FlashAttention-3 sink backward:
``dL/ds_h = -sum_i P_i,h * D_i`` with ``D_i = rowsum(dO_sink_i * O_sink_i)`` and
``P_i,h = exp(s_h - LSE'_i)`` (LSE' including the sink), provided the kernel is
differentiable w.r.t. its LSE output. ``torch.nn.attention.flex_attention`` is (its math
and Triton backward take ``grad_logsumexp``), so :func:`flex_sink_attention` is a fused,
sink-exact kernel on GPU: flex for the causal / sliding-window block-sparse part, then one
elementwise correction. A fully masked row has ``LSE = -inf`` and output 0, as in eager.

Torch 2.13 runs flex attention on CPU only without gradients, so on CPU training uses
transformers' eager attention; :func:`dense_sink_attention` is a plain-torch reference with
the same (output, LSE) split, used by the tests to check the correction and its gradients.

:func:`register_sink_attention` registers the kernel with transformers' ``AttentionInterface``
as ``"agentgym_flex"``, with :func:`sink_block_mask` as its ``BlockMask`` builder.

Why our own mask builder: compiled flex attention specialises on the code of the mask function.
transformers builds a new nest of closures per mask (causal or sliding window, with or without
padding, ``and_masks`` around them), and compiled flex (and ``create_block_mask``) guard on each
closure's code: a GPT-OSS learner with varying padding met 4+ variants per shape and hit dynamo's
recompile limit (8) on its first steps on an H200, after which flex falls back to the unfused
kernel that materialises every (query, key) score. :func:`sink_block_mask` expresses causality,
the window, the offsets and padding with one mask function whose state is tensors, so one
compiled kernel (dynamic in shape after the second length) serves every layer and batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = [
    "ATTN_NAME",
    "apply_sinks",
    "causal_block_mask",
    "dense_sink_attention",
    "flex_sink_attention",
    "register_sink_attention",
    "set_attention",
    "sink_block_mask",
    "sink_mask_mod",
    "sink_attention_forward",
]

ATTN_NAME = "agentgym_flex"
_compiled_flex: Any = None
_compiled_block_mask: Any = None


def apply_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Turn a plain attention output into the sink attention output.

    out (B, H, Tq, D), lse (B, H, Tq) natural-log LSE of the scaled scores (no sink),
    sinks (H,) -> (B, H, Tq, D) in ``out``'s dtype; the factor is computed in float32.
    """
    factor = torch.sigmoid(lse.float() - sinks.float().view(1, -1, 1))  # (B, H, Tq)
    return (out.float() * factor.unsqueeze(-1)).to(out.dtype)


def dense_sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Reference sink attention in plain torch: (output, LSE) then :func:`apply_sinks`.

    q (B, Hq, Tq, D); k, v (B, Hkv, Tk, D) with Hq a multiple of Hkv; ``allowed`` bool
    broadcastable to (B, Hq, Tq, Tk), True where query i may attend key j. -> (B, Hq, Tq, D).
    """
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)).float() * scale  # (B, H, Tq, Tk)
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, Tq); -inf on fully masked rows
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    probs = torch.exp(scores - safe.unsqueeze(-1))  # exactly 0 on masked keys
    out = (probs.to(v.dtype) @ v).to(q.dtype)
    return apply_sinks(out, lse, sinks)


def _flex() -> Any:
    """flex_attention, compiled once on CUDA (eager flex is a slow math fallback there)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if _compiled_flex is None:
        # default dynamic handling: after the first new sequence length torch marks it dynamic
        # instead of recompiling for every batch shape
        _compiled_flex = torch.compile(flex_attention) if torch.cuda.is_available() else flex_attention
    return _compiled_flex


def flex_sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor,
    block_mask: Any = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Sink attention with flex attention + LSE correction (module doc); shapes as dense."""
    from torch.nn.attention.flex_attention import AuxRequest

    flex = _flex() if q.is_cuda else _flex_eager()
    out, aux = flex(
        q,
        k,
        v,
        block_mask=block_mask,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
        return_aux=AuxRequest(lse=True),
    )
    return apply_sinks(out, aux.lse, sinks)


def _flex_eager() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


def sink_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    s_aux: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function (``AttentionInterface``) for ``"agentgym_flex"``.

    query (B, Hq, Tq, D), key/value (B, Hkv, Tk, D), ``attention_mask`` a flex ``BlockMask``
    (built by the registered mask function) or None for plain causal. Returns the output in
    transformers' layout (B, Tq, Hq, D) and no attention weights.
    """
    if dropout:
        raise ValueError("agentgym_flex attention has no dropout; set attention_dropout=0")
    sinks = s_aux if s_aux is not None else getattr(module, "sinks", None)
    if sinks is None:  # a model without sinks: the correction factor must be exactly 1
        sinks = torch.full((query.shape[1],), float("-inf"), device=query.device)
    block_mask = attention_mask
    if isinstance(attention_mask, torch.Tensor):
        raise ValueError(
            "agentgym_flex expects a flex BlockMask from transformers' mask builder, got a dense "
            "tensor; call register_sink_attention() before building the model's masks"
        )
    if block_mask is None:  # never fall back to flex's default, which is *non-causal*
        block_mask = causal_block_mask(query.shape[-2], key.shape[-2], kwargs.get("sliding_window"), query.device)
    out = flex_sink_attention(query, key, value, sinks, block_mask=block_mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def causal_block_mask(q_len: int, kv_len: int, window: int | None, device: torch.device) -> Any:
    """Causal (optionally sliding-window) BlockMask; queries are the last ``q_len`` positions."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = kv_len - q_len

    def mask_mod(b: Any, h: Any, q: Any, k: Any) -> Any:
        qpos = q + offset
        ok = k <= qpos
        if window is not None:
            ok = ok & (qpos - k < window)
        return ok

    return create_block_mask(mask_mod, None, None, q_len, kv_len, device=device)


_FULL = 1 << 30  # the "window" of a full-attention layer: wider than any sequence


def _mask_mod(valid: torch.Tensor, q_offset: torch.Tensor, kv_offset: torch.Tensor, window: torch.Tensor) -> Any:
    """The one mask function of every ``sink_block_mask``: its state is in tensors (module doc)."""

    def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
        qpos = q + q_offset
        kpos = kv + kv_offset
        return (kpos <= qpos) & (qpos - kpos < window) & valid[b, kv]

    return mask_mod


def _window_of(mask_function: Any, local_size: int | None) -> int | None:
    """The window transformers' ``mask_function`` encodes: ``_FULL`` for plain causal, the sliding
    window for ``and_masks(sliding_window_overlay(w), causal_mask_function)``, None for anything
    else (packed sequences, custom and/or masks), which :func:`sink_block_mask` hands back."""
    import inspect

    from transformers.masking_utils import causal_mask_function

    if mask_function is causal_mask_function:
        return _FULL
    if local_size is None or getattr(mask_function, "__qualname__", "") != "and_masks.<locals>.and_mask":
        return None
    parts = inspect.getclosurevars(mask_function).nonlocals.get("mask_functions", ())
    if len(parts) != 2 or parts[1] is not causal_mask_function:
        return None
    overlay = parts[0]
    if getattr(overlay, "__qualname__", "") != "sliding_window_overlay.<locals>.inner_mask":
        return None
    window = inspect.getclosurevars(overlay).nonlocals.get("sliding_window")
    return int(local_size) if window == local_size else None


def sink_mask_mod(
    batch_size: int,
    q_offset: int,
    kv_length: int,
    kv_offset: int,
    mask_function: Any,
    attention_mask: torch.Tensor | None,
    device: torch.device | str,
    local_size: int | None,
) -> Any:
    """The mask function of :func:`sink_block_mask`, or None for a mask it does not recognise."""
    window = _window_of(mask_function, local_size)
    if window is None:
        return None
    if attention_mask is None:
        valid = torch.ones(batch_size, kv_length, dtype=torch.bool, device=device)
    else:
        pad = kv_offset + kv_length - attention_mask.shape[-1]
        full = torch.nn.functional.pad(attention_mask, (0, pad)) if pad > 0 else attention_mask
        # a fresh contiguous copy: compiled code guards on a captured tensor's strides and storage
        # offset, and a slice of the mask (sliding layers behind a KV cache) varies in both
        valid = full[:, kv_offset : kv_offset + kv_length].to(device=device, dtype=torch.bool)
        valid = valid.clone(memory_format=torch.contiguous_format)
    state = [torch.as_tensor(x, device=device) for x in (q_offset, kv_offset, window)]
    return _mask_mod(valid, *state)


def sink_block_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
    local_size: int | None = None,
    **kwargs: Any,
) -> Any:
    """transformers mask builder (``ALL_MASK_ATTENTION_FUNCTIONS``) for ``"agentgym_flex"``.

    Same arguments and the same mask as transformers' ``flex_attention_mask`` (query i at
    ``i + q_offset`` sees key j at ``j + kv_offset`` when it is not later, within the layer's
    window, and not padding in ``attention_mask`` (B, >= kv_offset + kv_length)), built from one
    mask function for every layer and batch (module doc). Masks it does not recognise go to
    transformers' builder unchanged.
    """
    from transformers.masking_utils import causal_mask_function, flex_attention_mask

    mask_function = causal_mask_function if mask_function is None else mask_function
    mask_mod = sink_mask_mod(batch_size, q_offset, kv_length, kv_offset, mask_function, attention_mask, device,
                             local_size)
    if mask_mod is None:
        return flex_attention_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function,
                                   attention_mask, device, local_size=local_size, **kwargs)
    return _block_mask_builder(device)(mask_mod, batch_size, None, q_length, kv_length, device=device)


def _block_mask_builder(device: torch.device | str) -> Any:
    """``create_block_mask``, compiled once for CUDA (as transformers' ``_compile=True`` does,
    without its deprecation): the eager one materialises the whole (B, Q, KV) mask. On CPU it
    stays eager, like flex itself there (:func:`_flex`): no inductor C++ build for a mask."""
    global _compiled_block_mask
    from torch.nn.attention.flex_attention import create_block_mask

    if torch.device(device).type != "cuda":
        return create_block_mask
    if _compiled_block_mask is None:
        _compiled_block_mask = torch.compile(create_block_mask)
    return _compiled_block_mask


def register_sink_attention(name: str = ATTN_NAME) -> str:
    """Register the kernel and its BlockMask builder with transformers; returns ``name``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(name, sink_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sink_block_mask)
    return name


def set_attention(model: nn.Module, name: str) -> nn.Module:
    """Switch a loaded model's attention implementation (registering ``agentgym_flex`` first).

    Writes the config field directly: GPT-OSS declares ``_supports_sdpa = False`` and custom
    registered names are not in transformers' validation list. No sink check here; use
    ``agentgym.trainer.model.gptoss.check_attention`` (``load_policy`` does) before training.
    """
    if name == ATTN_NAME:
        register_sink_attention(name)
    config: Any = model.config
    config._attn_implementation = name
    return model
