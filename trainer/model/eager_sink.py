"""GPT-OSS's eager sink attention for the trainer's CPU forward: the same numbers, fewer passes.

transformers' ``eager_attention_forward`` for GPT-OSS computes, per layer, on (B, H, Tq, Tk)
scores: ``S * scaling + mask``, ``cat`` with the sink logit as one more column, minus the row
max, softmax, drop the sink column, then ``probs @ V``. On CPU at the warm start's lengths
(~370 queries x ~650 keys per row) those elementwise passes and the ones autograd adds for
their backward (a zero-filled copy for the dropped column, the negated gradient of the max,
a zero tensor with the max's gradient scattered into it, their sum) were ~75% of a step.

:func:`sink_eager_attention` is that function with the softmax part as one autograd
:class:`SinkSoftmax` that does the same float operations with fewer full-size passes:

* forward: the scaled scores are written straight into the (Tk + 1)-column buffer (no ``cat``),
  the mask is added in place, and the softmax runs on the unshifted logits: softmax subtracts
  the row max itself, so ``softmax(x)`` and ``softmax(x - max(x))`` evaluate ``exp`` at the same
  floats ``x - max(x)``;
* backward: autograd's result, term by term: the softmax backward; then the gradient through
  the (not detached) max, ``-sum(g)`` at the argmax, added in place at that one position
  instead of via a negated copy and a scattered zero tensor; then the sink column summed as
  ``expand``'s backward does (``sum_to_size``) and the score columns times ``scaling``.

The result is bit-identical to eager, values and gradients (tests/trainer/test_eager_sink.py;
a gradient may differ only in the sign of an exact zero, which no weight update can see). The
trainer's forward (``logprobs.py``) switches an ``eager`` model to it around its backbone
call; other devices than the CPU (where it was checked), autocast, dropout and dtypes other
than float32 go to transformers' eager unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["SINK_EAGER", "SinkSoftmax", "sink_eager_attention", "trainer_attention"]

SINK_EAGER = "agentgym_sink_eager"


class SinkSoftmax(torch.autograd.Function):
    """``softmax(cat([S * scaling + mask, sink], -1) - max)[..., :-1]`` as GPT-OSS's eager
    attention computes it. S (B, H, Tq, Tk) float32, mask broadcastable to S or None, sinks (H,)
    -> probs (B, H, Tq, Tk): a view of the (B, H, Tq, Tk + 1) softmax, as eager's slice is."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, scaling: float, mask: torch.Tensor | None,
                sinks: torch.Tensor) -> torch.Tensor:
        B, H, Tq, Tk = scores.shape
        logits = scores.new_empty(B, H, Tq, Tk + 1)
        torch.mul(scores, scaling, out=logits[..., :Tk])
        if mask is not None:
            logits[..., :Tk].add_(mask)
        logits[..., Tk:] = sinks.reshape(1, -1, 1, 1)
        argmax = logits.max(dim=-1, keepdim=True).indices  # (B, H, Tq, 1): where eager's max routes its gradient
        probs = torch.softmax(logits, dim=-1, dtype=logits.dtype)
        ctx.save_for_backward(probs, argmax)
        ctx.scaling = scaling
        return probs[..., :-1]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        probs, argmax = ctx.saved_tensors
        Tk = probs.shape[-1] - 1
        g_probs = torch.empty_like(probs)  # the slice's backward: grad, and 0 for the sink column
        g_probs[..., :Tk] = grad
        g_probs[..., Tk:] = 0
        g = torch._softmax_backward_data(g_probs, probs, -1, probs.dtype)  # (B, H, Tq, Tk + 1)
        del g_probs
        # eager's `x - x.max()`: the max gets -sum(g) (sum(-g) in eager: the same float, negated)
        g.scatter_add_(-1, argmax, g.sum(-1, keepdim=True).neg_())
        g_sinks = g[..., Tk:].sum_to_size(1, probs.shape[1], 1, 1).reshape(-1)  # expand's backward
        return g[..., :Tk].mul_(ctx.scaling), None, None, g_sinks  # mul's backward, in place


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """transformers' ``repeat_kv``: (B, Hkv, T, D) -> (B, Hkv * n_rep, T, D)."""
    if n_rep == 1:
        return x
    B, Hkv, T, D = x.shape
    return x[:, :, None].expand(B, Hkv, n_rep, T, D).reshape(B, Hkv * n_rep, T, D)


def sink_eager_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                         **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GPT-OSS's eager attention (transformers' ``eager_attention_forward``) with
    :class:`SinkSoftmax`; query (B, H, Tq, D), key/value (B, Hkv, Tk, D) -> (B, Tq, H, D)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    sinks: Any = module.sinks
    dev = query.device.type
    plain = (dev == "cpu" and query.dtype == key.dtype == value.dtype == sinks.dtype == torch.float32
             and not torch.is_autocast_enabled(dev) and not (dropout and module.training))
    if not plain:
        return eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout, **kwargs)  # type: ignore[no-any-return]
    n_rep = int(module.num_key_value_groups)  # type: ignore[arg-type]
    key_states, value_states = _repeat_kv(key, n_rep), _repeat_kv(value, n_rep)
    probs = SinkSoftmax.apply(torch.matmul(query, key_states.transpose(2, 3)), scaling, attention_mask, sinks)
    out = torch.matmul(probs, value_states)
    return out.transpose(1, 2).contiguous(), probs


@contextmanager
def trainer_attention(model: nn.Module) -> Iterator[None]:
    """Run ``model`` with :func:`sink_eager_attention` where it uses transformers' ``eager``
    (the CPU default); any other attention is left as it is."""
    config: Any = getattr(model, "config", None)
    previous = getattr(config, "_attn_implementation", None)
    if previous != "eager" or getattr(config, "model_type", "") != "gpt_oss":
        yield
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(SINK_EAGER, sink_eager_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SINK_EAGER, eager_mask)
    config._attn_implementation = SINK_EAGER
    try:
        yield
    finally:
        config._attn_implementation = previous
