"""Per-token log-probs, entropy and values of a causal LM on given token ids.

The one forward pass of agentgym: the trainer (PPO and warm start), the reference model, the
doctor and the engines' checks all call :func:`policy_forward`. Conventions (shared with the
engines and the PPO code):

* ``logprobs[:, t] = log_softmax(logits[:, t-1] / temperature)[input_ids[:, t]]``, computed in
  float32; ``logprobs[:, 0] = 0`` (nothing predicts the first token).
* ``entropy[:, t]`` is the entropy of that same distribution (after temperature).
* ``values[:, t] = value_head(hidden[:, t-1])``: the critic's estimate of the state in which
  token ``t`` is decided, aligned with ``logprobs``; ``values[:, 0] = 0``.
* Positions come from ``attention_mask.cumsum(-1) - 1``, so left- or right-padded rows give
  the same numbers as the unpadded sequence.

**Shared prefix** (``shared_prefix=P``): when every row starts with the same ``P`` tokens (the
system + developer prompt of an environment), they run once at batch size 1 and the rows
attend to them through the KV cache; gradients flow back through the cache into that single
pass. It is the same function of the weights as ``P = 0`` (same values up to float rounding,
same gradients): only how the backbone is called differs, the head below is shared.

**The output head** runs only where log-probs are asked for (``score_mask``: the policy
tokens, for the trainer), over chunks of rows whose float32 logits take at most
``head_chunk_bytes`` (1 GiB: 1,335 rows at GPT-OSS's 201,088-token vocabulary; the (N, V)
logits of N scored tokens are never held at once: one 4k-token episode alone would need 3.3 GB).
Two implementations, the same function (checked against each other, values and gradients):

* ``chunked``: ``log_softmax`` + ``gather`` per chunk under activation checkpointing (autograd
  materialises each chunk's (n, V) gradient of the log-softmax and of the gather);
* ``fused`` (:class:`FusedLinearLogprob`): a custom autograd function that keeps per row only the
  log-sum-exp, and in the backward recomputes each chunk's logits and forms the gradient of the
  logits directly (``p - onehot``, and ``-p (log p + H)`` for the entropy) before the two matrix
  products: no (n, V) log-softmax, gather or their gradients. It reads ``head.weight``, so it
  serves a bias-free ``nn.Linear`` only; any other head (one with a bias, or PEFT's LoRA wrapper
  when ``model.lora.targets`` names ``lm_head``) runs chunked, through the module's own forward.

``head="auto"`` takes ``fused`` on CUDA (the profile of the H100 learner put ~30% of its time in
the chunked head's log-softmax and gather) and ``chunked`` on CPU (where it is what the CPU
results were measured with). Entropy is computed without gradient unless ``entropy_grad``
(an entropy bonus in the loss). The MoE layers are switched to a path that loops over (or
groups by) the experts actually hit (see ``gptoss.py``). A model on transformers' ``eager``
attention (the CPU default) runs the backbone on :func:`~.eager_sink.sink_eager_attention`: the
same numbers, bit for bit, with fewer full-size passes over the scores (``eager_sink.py``).

Sharded models (FSDP2): :func:`agentgym.trainer.model.sharding.shard_policy` registers this
function as a forward method of the root module, so its parameters (embeddings, final norm,
output head) are gathered around the whole pass, head included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from agentgym.errors import ConfigError

from .eager_sink import trainer_attention
from .gptoss import use_memory_efficient_experts

__all__ = ["HEAD_CHUNK_BYTES", "HEAD_IMPLEMENTATIONS", "ForwardOut", "FusedLinearLogprob", "forward_tuple",
           "head_rows", "policy_forward"]

# Float32 logits per head chunk: 1 GiB = 1,335 rows at V = 201,088 (1M rows at the byte vocab).
# 2^24 elements (64 MiB) made the H100 learner 2.2x slower (each chunk re-reads the whole head).
HEAD_CHUNK_BYTES = 1 << 30
HEAD_IMPLEMENTATIONS = ("auto", "fused", "chunked")
FORWARD_METHOD = "agentgym_forward"  # name of the FSDP-registered forward on sharded models


def head_rows(chunk_bytes: int, vocab: int) -> int:
    """Rows of float32 logits per head chunk."""
    return max(1, int(chunk_bytes) // (4 * int(vocab)))


@dataclass
class ForwardOut:
    """Result of :func:`policy_forward`; every tensor is (B, T) float32."""

    logprobs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None = None


def _head_chunk(head: nn.Module, h: torch.Tensor, targets: torch.Tensor, temperature: float,
                entropy: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, H) hidden rows -> (n,) log-probs and (n,) entropy; ``entropy`` in none/value/grad."""
    logits = head(h).float()  # (n, V): the only place logits exist, one chunk at a time
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if entropy == "grad":
        ent = -(logp_all.exp() * logp_all).sum(-1)
    elif entropy == "value":
        with torch.no_grad():
            ent = -(logp_all.exp() * logp_all).sum(-1)
    else:
        ent = torch.zeros_like(lp)
    return lp, ent


class FusedLinearLogprob(torch.autograd.Function):
    """log p(target) and entropy of ``softmax(h W^T / T)`` per row, chunk by chunk, without
    keeping (n, V) logits for the backward (module doc).

    h (N, H), weight (V, H), targets (N,) -> logp (N,), entropy (N,) in float32. ``entropy``:
    ``none`` (zeros), ``value`` (no gradient) or ``grad``. The logits are ``F.linear(h, W)`` in
    whatever dtype autocast or the inputs give, then float32, as in the chunked head.
    """

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float,
                rows: int, entropy: str) -> tuple[torch.Tensor, torch.Tensor]:
        n = h.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        lp = torch.empty_like(lse)
        ent = torch.zeros_like(lse)
        for s in range(0, n, rows):  # at most two (n, V) float32 arrays at a time: z and p
            z = F.linear(h[s : s + rows], weight).float()  # (n, V): one chunk at a time
            if temperature != 1.0:
                z = z / temperature
            lse[s : s + rows] = torch.logsumexp(z, dim=-1)
            lp[s : s + rows] = z.gather(-1, targets[s : s + rows, None]).squeeze(-1) - lse[s : s + rows]
            if entropy != "none":
                p = (z - lse[s : s + rows, None]).exp_()
                ent[s : s + rows] = lse[s : s + rows] - (p[:, None, :] @ z[:, :, None]).view(-1)  # sum p z
                del p
        ctx.save_for_backward(h, weight, targets, lse, ent)
        ctx.temperature, ctx.rows, ctx.entropy = temperature, rows, entropy
        dev = h.device.type  # the backward recomputes the logits under the same autocast
        ctx.autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        ctx.mark_non_differentiable(*(() if entropy == "grad" else (ent,)))
        return lp, ent

    @staticmethod
    def backward(ctx: Any, g_lp: torch.Tensor | None, g_ent: torch.Tensor | None) -> tuple[Any, ...]:
        dev, enabled, dtype = ctx.autocast
        with torch.autocast(dev, dtype=dtype, enabled=enabled):
            return FusedLinearLogprob._backward(ctx, g_lp, g_ent)

    @staticmethod
    def _backward(ctx: Any, g_lp: torch.Tensor | None, g_ent: torch.Tensor | None) -> tuple[Any, ...]:
        h, weight, targets, lse, ent = ctx.saved_tensors
        T, rows = ctx.temperature, ctx.rows
        use_ent = ctx.entropy == "grad" and g_ent is not None
        grad_h = torch.zeros_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        for s in range(0, h.shape[0], rows):  # in place: at most two (n, V) float32 arrays
            hc = h[s : s + rows]
            logits = F.linear(hc, weight)
            dtype = logits.dtype
            z = logits.float() if dtype != torch.float32 else logits
            del logits
            if T != 1.0:
                z.div_(T)
            z.sub_(lse[s : s + rows, None])  # log p
            coef = torch.zeros_like(lse[s : s + rows]) if g_lp is None else g_lp[s : s + rows]
            # d logp_t / dz = onehot_t - p ; d H / dz = -p (log p + H):
            # dL/dz = onehot_t * g_lp - p * (g_lp + g_ent * (log p + H))
            if use_ent:
                assert g_ent is not None
                gz = z.exp()
                z.add_(ent[s : s + rows, None]).mul_(g_ent[s : s + rows, None]).add_(coef[:, None])
                gz.mul_(z).neg_()
            else:
                gz = z.exp_().mul_(-coef[:, None])
            del z
            gz.scatter_add_(-1, targets[s : s + rows, None], coef[:, None])
            if T != 1.0:
                gz.div_(T)
            gz = gz.to(dtype)
            if grad_h is not None:
                grad_h[s : s + rows] = (gz @ weight.to(gz.dtype)).to(h.dtype)
            if grad_w is not None:
                grad_w += (gz.t() @ hc.to(gz.dtype)).to(weight.dtype)
        return grad_h, grad_w, None, None, None, None


def _fused_head(head: nn.Module, h: torch.Tensor, targets: torch.Tensor, temperature: float, rows: int,
                entropy: str) -> tuple[torch.Tensor, torch.Tensor]:
    lp, ent = FusedLinearLogprob.apply(h, head.weight, targets, temperature, rows, entropy)
    return lp, ent


def _chunked_head(head: nn.Module, h: torch.Tensor, targets: torch.Tensor, temperature: float, rows: int,
                  entropy: str) -> tuple[torch.Tensor, torch.Tensor]:
    ckpt = torch.is_grad_enabled() and h.requires_grad and h.shape[0] > rows
    lps, ents = [], []
    for s in range(0, h.shape[0], rows):
        args = (head, h[s : s + rows], targets[s : s + rows], temperature, entropy)
        lp, ent = checkpoint(_head_chunk, *args, use_reentrant=False) if ckpt else _head_chunk(*args)
        lps.append(lp)
        ents.append(ent)
    flat_lp = torch.cat(lps) if lps else h.new_zeros(0, dtype=torch.float32)
    return flat_lp, (torch.cat(ents) if ents else flat_lp)


def _backbone(model: nn.Module) -> nn.Module:
    base = getattr(model, "base_model_prefix", "model")
    inner = getattr(model, base, None)
    if inner is None:
        raise ConfigError(
            f"expected a transformers *ForCausalLM with a .{base} backbone, got {type(model).__name__}"
        )
    return inner


def _predicting_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       shared_prefix: int) -> torch.Tensor:
    """Hidden states that predict tokens 1..T-1 -> (B, T-1, H); row t-1 predicts token t."""
    backbone = _backbone(model)
    if shared_prefix <= 0:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=False).last_hidden_state
        return hidden[:, :-1]
    from transformers import DynamicCache

    P, (B, T) = shared_prefix, input_ids.shape
    if not (bool((input_ids[:, :P] == input_ids[:1, :P]).all()) and bool(attention_mask[:, :P].all())):
        raise ConfigError(f"shared_prefix={P}: the rows do not all start with the same {P} real tokens")
    dev = input_ids.device
    cache: Any = DynamicCache(config=model.config)  # type: ignore[arg-type]
    pre = backbone(input_ids=input_ids[:1, :P], use_cache=True, past_key_values=cache,
                   position_ids=torch.arange(P, device=dev)[None]).last_hidden_state  # (1, P, H)
    for layer in cache.layers:  # (1, H, p, D) -> (B, H, p, D) views: no copy, grads sum back
        layer.keys = layer.keys.expand(B, -1, -1, -1)
        layer.values = layer.values.expand(B, -1, -1, -1)
    positions = torch.arange(P, T, device=dev)[None].expand(B, -1)
    suffix = backbone(input_ids=input_ids[:, P:], attention_mask=attention_mask, position_ids=positions,
                      past_key_values=cache, use_cache=True).last_hidden_state  # (B, T-P, H)
    return torch.cat([pre.expand(B, -1, -1), suffix[:, :-1]], dim=1)  # (B, T-1, H)


def forward_tuple(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                  temperature: float, value_head: nn.Module | None, entropy: str, shared_prefix: int,
                  score_mask: torch.Tensor | None, head_chunk_bytes: int, head: str) -> tuple[torch.Tensor, ...]:
    """The body of :func:`policy_forward` (arguments checked) -> (logprobs, entropy, values or
    None): a tuple, so that FSDP finds the output tensors to hook its backward on."""
    B, T = input_ids.shape
    with trainer_attention(model):  # eager's numbers with fewer passes (eager_sink.py)
        h = _predicting_hidden(model, input_ids, attention_mask, shared_prefix)  # (B, T-1, H)
    out_head: Any = model.get_output_embeddings()  # type: ignore[operator]
    vocab = int(out_head.weight.shape[0])
    if score_mask is None:
        sel = None
        h_sel, targets = h.reshape(-1, h.shape[-1]), input_ids[:, 1:].reshape(-1)  # views
    else:
        sel = score_mask[:, 1:].to(torch.bool)  # (B, T-1)
        h_sel, targets = h[sel], input_ids[:, 1:][sel]  # (N, H), (N,)
    if head == "auto":
        head = "fused" if h_sel.is_cuda else "chunked"
    if head == "fused" and (getattr(out_head, "bias", None) is not None or not isinstance(out_head, nn.Linear)):
        # the fused head computes h @ weight.T: a bias-free nn.Linear (GPT-OSS's). A wrapped head
        # (PEFT's LoRA on lm_head) adds its adapters in its forward, and its .weight is the base's alone
        head = "chunked"
    run = _fused_head if head == "fused" else _chunked_head
    flat_lp, flat_ent = run(out_head, h_sel, targets, temperature, head_rows(head_chunk_bytes, vocab), entropy)
    if sel is None:
        lp_pred, ent_pred = flat_lp.view(B, T - 1), flat_ent.view(B, T - 1)
    else:
        zeros = torch.zeros(B, T - 1, dtype=torch.float32, device=input_ids.device)
        lp_pred, ent_pred = zeros.index_put((sel,), flat_lp), zeros.index_put((sel,), flat_ent)
    zero = torch.zeros(B, 1, dtype=torch.float32, device=input_ids.device)
    values = None
    if value_head is not None:
        values = torch.cat([zero, value_head(h).float()], dim=1)  # (B, T)
    return torch.cat([zero, lp_pred], dim=1), torch.cat([zero, ent_pred], dim=1), values  # type: ignore[return-value]


def policy_forward(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    value_head: nn.Module | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = False,
    shared_prefix: int = 0,
    score_mask: torch.Tensor | None = None,
    head_chunk_bytes: int = HEAD_CHUNK_BYTES,
    head: str = "auto",
) -> ForwardOut:
    """Log-probs (after ``temperature``) of ``input_ids`` (B, T) under ``model``; see module doc.

    ``score_mask`` (B, T): positions whose log-prob and entropy are computed (others are 0);
    default all. ``with_entropy=False`` skips the entropy; ``entropy_grad=True`` keeps its
    gradient (only for an entropy term in the loss). ``shared_prefix``: number of leading
    tokens every row shares (computed once). ``head_chunk_bytes``: float32 logits per head
    chunk; ``head``: ``auto``, ``fused`` or ``chunked`` (module doc).
    """
    if head not in HEAD_IMPLEMENTATIONS:
        raise ConfigError(f"head must be one of {HEAD_IMPLEMENTATIONS}, got {head!r}")
    if temperature <= 0:
        raise ConfigError(
            f"temperature must be > 0 for log-probs, got {temperature}; greedy decoding is "
            "scored at temperature 1.0."
        )
    if input_ids.dim() != 2:
        raise ConfigError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    if not 0 <= shared_prefix < input_ids.shape[1]:
        raise ConfigError(f"shared_prefix must be in [0, T), got {shared_prefix} for T={input_ids.shape[1]}")
    use_memory_efficient_experts(model)
    if getattr(getattr(model, "config", None), "final_logit_softcapping", None):
        # logits are computed as lm_head(last hidden state) below; a soft-capped head would differ
        raise ConfigError("policy_forward does not support models with final_logit_softcapping")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(input_ids.device).long()
    entropy = ("grad" if entropy_grad else "value") if with_entropy else "none"
    body = getattr(model, FORWARD_METHOD, None)  # the FSDP-registered wrapper of forward_tuple
    kw: dict[str, Any] = dict(temperature=temperature, value_head=value_head, entropy=entropy,
                              shared_prefix=shared_prefix, score_mask=score_mask,
                              head_chunk_bytes=head_chunk_bytes, head=head)
    out = body(input_ids, attention_mask, **kw) if body is not None else forward_tuple(
        model, input_ids, attention_mask, **kw)
    return ForwardOut(logprobs=out[0], entropy=out[1], values=out[2])
