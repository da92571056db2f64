"""The policy under FSDP2: built on the meta device, allocated, sharded one decoder layer per unit.

:func:`policy_skeleton` gives the architecture without memory, :func:`materialize` allocates it,
:func:`shard_policy` wraps it in FSDP2 (with :func:`~agentgym.trainer.model.logprobs.policy_forward`
registered as a forward method) and :func:`shard_module` the value head. The process layout
(ranks, collectives, gathered weights) is :mod:`agentgym.trainer.distributed`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agentgym.errors import ConfigError

from .attention import set_attention
from .gptoss import memory_efficient_experts, resolve_attention, tiny_gptoss_config
from .logprobs import FORWARD_METHOD, forward_tuple

__all__ = ["materialize", "policy_skeleton", "shard_module", "shard_policy"]


def policy_skeleton(name: str, vocab_size: int, tiny: dict[str, Any], *, attn_implementation: str,
                    device: torch.device | str) -> nn.Module:
    """The policy's architecture on the meta device (float32, no memory, no weights): ``tiny``
    (with the ``model.tiny`` overrides) or the config of a local dir / hub id. MXFP4 checkpoints
    give the dequantized (bf16-shaped) expert layout: their weights are loaded dequantized."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if name == "tiny":
        config = tiny_gptoss_config(vocab_size, **dict(tiny))
    else:
        config = AutoConfig.from_pretrained(name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
    attn = resolve_attention(attn_implementation, device, head_dim=getattr(config, "head_dim", None))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    set_attention(model, attn)
    config._experts_implementation = memory_efficient_experts(device)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = config.pad_token_id
    return model  # type: ignore[no-any-return]


def materialize(model: nn.Module, device: torch.device | str) -> nn.Module:
    """Allocate a model built on the meta device (values undefined) and recompute its
    non-persistent buffers (rotary ``inv_freq``: they are in no state dict) from its config."""
    model.to_empty(device=device)
    config = getattr(model, "config", None)
    for name, mod in model.named_modules():
        bufs: set[str] = getattr(mod, "_non_persistent_buffers_set", set())
        if not bufs:
            continue
        try:
            fresh = type(mod)(config=getattr(mod, "config", config))
        except TypeError as e:
            raise ConfigError(f"cannot rebuild the buffers {sorted(bufs)} of {name or 'the model'} "
                              f"({type(mod).__name__}) after meta-device construction: {e}") from e
        for b in bufs:
            getattr(mod, b).copy_(getattr(fresh, b).to(device))
    return model


def shard_policy(model: nn.Module, *, compute_dtype: torch.dtype, reshard_after_forward: bool = True,
                 mixed_precision: bool = True) -> nn.Module:
    """FSDP2 over the default process group: one unit per decoder layer, then the root
    (embeddings, final norm, output head). With ``mixed_precision`` parameters stay in their
    dtype (float32 master weights) and are cast to ``compute_dtype`` when gathered; gradients
    are reduced in float32. :func:`agentgym.trainer.model.logprobs.policy_forward` is registered as
    an FSDP forward method, so the root's parameters are gathered around the whole pass."""
    import types

    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    kw: dict[str, Any] = {}
    if mixed_precision:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    layers = getattr(getattr(model, getattr(model, "base_model_prefix", "model"), None), "layers", None)
    if layers is None:
        raise ConfigError(f"cannot shard {type(model).__name__}: expected transformers' "
                          ".model.layers list of decoder layers")
    for layer in layers:
        fully_shard(layer, reshard_after_forward=reshard_after_forward, **kw)
    # the root's parameters (the output head) are used right after its forward: keep them
    fully_shard(model, reshard_after_forward=False, **kw)
    setattr(model, FORWARD_METHOD, types.MethodType(forward_tuple, model))
    register_fsdp_forward_method(model, FORWARD_METHOD)
    return model


def shard_module(module: nn.Module, *, compute_dtype: torch.dtype) -> nn.Module:
    """A small module (the value head) as one FSDP unit with the policy's precision policy."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32))
    return module


