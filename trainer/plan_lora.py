"""The memory plan of a LoRA run (``model.lora.rank`` > 0) and of the hf engine's KV cache; the
rest of the plan, and where these are called from, is :mod:`agentgym.trainer.plan`.

    lora_memory(counts, config, cfg, ...)   # bytes per device, by part, as plan.estimate_memory
    frozen_base_saving(config, precision="bf16", experts=False)   # bytes per token and layer

Checked against real LoRA updates on CPU: bench/trainer_memory.py --mode plan-lora.
"""

from __future__ import annotations

from typing import Any

__all__ = ["frozen_base_saving", "hf_kv_bytes", "lora_memory"]


def frozen_base_saving(config: Any, *, precision: str, experts: bool) -> float:
    """Bytes per token and layer that a frozen base (LoRA) does not save for the backward, against
    ``plan.layer_activation_bytes``: a frozen weight needs no copy of its input. Each norm's
    normalised float32 input to its weight's product (two norms); the router's input; without
    expert adapters, the experts' inputs to gate_up (H) and to down (I), k per token (with them,
    the matmuls against W + BA save their inputs again). The attention projections' inputs stay:
    their adapters save the same tensors."""
    H, Im, k = config.hidden_size, config.intermediate_size, getattr(config, "num_experts_per_tok", 1)
    b = 4 if precision == "float32" else 2
    return float(2 * 4 * H + b * H + (0 if experts else k * b * (H + Im)))


def hf_kv_bytes(config: Any, cfg: Any) -> float:
    """The hf engine's KV cache at its largest: ``max_batch_size`` rows (engine_kwargs, default 64)
    of ``env.max_tokens`` tokens in the compute dtype; sliding-window layers keep their window."""
    c = 2 if cfg.model.dtype == "bfloat16" else 4
    rows = min(int(cfg.rollout.engine_kwargs.get("max_batch_size", 64)),
               cfg.rollout.tasks_per_step * cfg.rollout.samples_per_task)
    T = cfg.env.max_tokens
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None) or T
    slots = sum(min(T, window) if k == "sliding_attention" else T for k in kinds)
    return float(rows * slots * 2 * config.num_key_value_heads * config.head_dim * c)


def lora_memory(counts: dict[str, int], config: Any, cfg: Any, *, c: int, per_layer: float, root: float,
                head: float, tokens: int, context: float, engine: dict[str, float]) -> dict[str, float]:
    """``plan.estimate_memory`` with ``model.lora.rank`` > 0 (one process): the base is frozen and
    held in the compute dtype (no gradients, no AdamW state); the adapters (``counts["adapters"]``,
    counted on the meta device with PEFT) have float32 weights, gradients and AdamW m, v. The KL
    reference is the base with the adapters off: nothing extra. Activations as for full training
    in that precision (a frozen linear no longer saves its input, but the adapter beside it saves
    the same input, and every elementwise op after the first adapter still saves its operands:
    an upper bound within a few percent, bench/trainer_memory.py --mode plan). Adapted experts:
    PEFT materialises W + BA of a layer's fused expert weights in the forward and the expert
    matmuls save it for the backward, per layer (one layer with gradient checkpointing); the
    backward of a layer adds its gradient (measured: without it the plan was 11% low at 4 layers
    of 8 experts, bf16, checkpointing). The hf
    engine shares these weights; its KV cache (:func:`hf_kv_bytes`) lives during the rollout. A
    vLLM engine holds its own merged copy (``engine``: its share of the GPU, and the sync's buffers,
    ``plan.engine_memory``)."""
    A, L = counts["adapters"], config.num_hidden_layers
    on_gpu, bf16, ckpt = cfg.model.device == "cuda", c == 2, cfg.model.gradient_checkpointing
    layers_act = L * tokens * config.hidden_size * c if ckpt else L * per_layer
    # W + BA kept for the backward (per layer, or the recomputed one), plus its gradient while one layer's
    # backward runs (the adapters' gradients flow through it)
    merged = c * counts["expert weights"] * ((1 if ckpt else L) + 1)
    mem = {
        "frozen base (compute dtype)": float(c * counts["total"]),
        "adapters fp32": 4.0 * A,
        "AdamW state fp32": 8.0 * A,
        "gradients fp32": 4.0 * A,
        "AdamW step temporary": 4.0 * (A if on_gpu else counts["largest adapter"]),
        "KL reference": 0.0,  # the base, adapters off
        "weights in compute dtype": (2.0 * A if bf16 else 0.0) + merged,  # autocast's adapter copies, W + BA
        "activations": layers_act + root + (max(head, per_layer) if ckpt else head),
        **engine,
    }
    if cfg.rollout.engine == "hf":
        mem["engine KV cache (hf)"] = hf_kv_bytes(config, cfg)
    resident = mem["frozen base (compute dtype)"] + mem["adapters fp32"] + mem["AdamW state fp32"] + context
    mem["peak during rollout"] = (resident + mem["engine awake"] + mem["weight sync buffers"]
                                  + mem.get("engine KV cache (hf)", 0.0))
    backward = mem["weights in compute dtype"] + mem["activations"]
    step = mem["gradients fp32"] + mem["AdamW step temporary"]
    mem["peak during update"] = resident + max(backward, step) + mem["engine asleep"]
    return mem
