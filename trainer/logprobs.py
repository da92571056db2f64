"""Per-token log-probs, entropy and values of a causal LM on given token ids.

The trainer's one forward pass. Conventions (shared with the engines and the PPO code):

* ``logprobs[:, t] = log_softmax(logits[:, t-1] / temperature)[input_ids[:, t]]``, computed in
  float32; ``logprobs[:, 0] = 0`` (nothing predicts the first token).
* ``entropy[:, t]`` is the entropy of that same distribution (after temperature).
* ``values[:, t] = value_head(hidden[:, t-1])``: the critic's estimate of the state in which
  token ``t`` is decided, aligned with ``logprobs``; ``values[:, 0] = 0``.
* Positions come from ``attention_mask.cumsum(-1) - 1``, so left- or right-padded rows give
  the same numbers as the unpadded sequence.

Memory: the (B, T, V) logits are never all alive at once for big vocabularies. The output
head runs over chunks of time steps, each under activation checkpointing when gradients are
needed, so the peak is one chunk of float32 logits. The MoE layers are switched to a path
that loops over (or groups by) the experts actually hit (see ``model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from agentgym.errors import ConfigError
from agentgym.trainer.model import use_memory_efficient_experts

__all__ = ["ForwardOut", "policy_forward", "token_logprobs"]

# Float32 logits per chunk (B * chunk * V elements) before we split the time axis.
_CHUNK_ELEMENTS = 1 << 26  # 256 MiB of float32


@dataclass
class ForwardOut:
    """Result of :func:`policy_forward`; every tensor is (B, T) float32."""

    logprobs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None = None


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and entropy per row of ``logits`` (N, V) -> ((N,), (N,)), in float32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)  # (N, V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    else:
        entropy = torch.zeros_like(logp)
    return logp, entropy


def _backbone(model: nn.Module) -> nn.Module:
    base = getattr(model, "base_model_prefix", "model")
    inner = getattr(model, base, None)
    if inner is None:
        raise ConfigError(
            f"expected a transformers *ForCausalLM with a .{base} backbone, got {type(model).__name__}"
        )
    return inner


def policy_forward(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    value_head: nn.Module | None = None,
    with_entropy: bool = True,
) -> ForwardOut:
    """Log-probs (after ``temperature``) of ``input_ids`` (B, T) under ``model``; see module doc."""
    if temperature <= 0:
        raise ConfigError(
            f"temperature must be > 0 for log-probs, got {temperature}; greedy decoding is "
            "scored at temperature 1.0."
        )
    if input_ids.dim() != 2:
        raise ConfigError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    use_memory_efficient_experts(model)
    if getattr(getattr(model, "config", None), "final_logit_softcapping", None):
        # logits are computed as lm_head(last hidden state) below; a soft-capped head would differ
        raise ConfigError("policy_forward does not support models with final_logit_softcapping")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(input_ids.device).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)

    hidden = _backbone(model)(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state  # (B, T, H)
    head: Any = model.get_output_embeddings()  # type: ignore[operator]

    B, T = input_ids.shape
    h = hidden[:, :-1]  # (B, T-1, H): position t-1 predicts token t
    targets = input_ids[:, 1:]  # (B, T-1)
    vocab = head.weight.shape[0]
    chunk = max(1, min(T, _CHUNK_ELEMENTS // max(1, B * vocab)))

    def head_chunk(hc: torch.Tensor, tc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head(hc)  # (B, c, V)
        lp, ent = token_logprobs(logits.reshape(-1, vocab), tc.reshape(-1), temperature, with_entropy)
        return lp.view(tc.shape), ent.view(tc.shape)

    lps, ents = [], []
    for s in range(0, T - 1, chunk):
        hc, tc = h[:, s : s + chunk], targets[:, s : s + chunk]
        if torch.is_grad_enabled() and hc.requires_grad and chunk < T - 1:
            lp, ent = checkpoint(head_chunk, hc, tc, use_reentrant=False)
        else:
            lp, ent = head_chunk(hc, tc)
        lps.append(lp)
        ents.append(ent)
    zero = torch.zeros(B, 1, dtype=torch.float32, device=input_ids.device)
    logprobs = torch.cat([zero, *lps], dim=1)  # (B, T)
    entropy = torch.cat([zero, *ents], dim=1)

    values = None
    if value_head is not None:
        values = torch.cat([zero, value_head(h).float()], dim=1)  # (B, T)
    return ForwardOut(logprobs=logprobs, entropy=entropy, values=values)
