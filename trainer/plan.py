"""The dry run: is a recipe's process layout consistent, and does it fit in GPU memory?

    agentgym-train --dry-run --config gptoss-20b-8gpu-vllm        # prints the plan, exit 0 / 2

Nothing is loaded and no GPU is needed (it runs in CI): the model is built on the meta device
(exact parameter count; hub ids of known architectures need no download) and the layout is
checked against the rules the trainer enforces at run time:

* ``distributed.nproc`` ranks, ``distributed.rollout_tp`` of them per rollout engine: the
  engines split ``rollout.tasks_per_step``, the ranks of one engine split its episodes;
* a vLLM engine is started from the trainer's own bf16 weights (``RUN_DIR/engine_init``), never
  from an MXFP4 checkpoint (its expert parameters are ``*_blocks``/``*_scales``, the trainer's
  ``gate_up_proj``/``down_proj``: a sync by name cannot update them); its tensor-parallel size
  is ``rollout_tp`` and its dtype the trainer's compute dtype; sleeping needs sleep mode on;
* memory per GPU in both phases (estimates, see :func:`estimate_memory`): rollout (learner
  state resident + the engine's share of the GPU) and update (learner state + gradients +
  gathered parameters + activations + the sleeping engine's residue).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError

__all__ = ["KNOWN_ARCHITECTURES", "MXFP4_HUB_IDS", "Plan", "check_engine_checkpoint", "estimate_memory",
           "make_plan", "plan_json"]

GIB = 1 << 30
# Public config.json values of the hub models (GptOssConfig's defaults are gpt-oss-120b's).
KNOWN_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "openai/gpt-oss-20b": {"num_hidden_layers": 24, "num_local_experts": 32},
    "openai/gpt-oss-120b": {"num_hidden_layers": 36, "num_local_experts": 128},
}
MXFP4_HUB_IDS = frozenset(KNOWN_ARCHITECTURES)  # both ship MXFP4 experts
CUDA_CONTEXT = 1.0 * GIB  # per process, CUDA/NCCL context and allocator slack
SLEEP_RESIDUE = 0.5 * GIB  # what a sleeping vLLM keeps (level 1 and 2)


@dataclass
class Plan:
    """The dry run's findings: layout, sizes (bytes), and problems (empty = consistent)."""

    layout: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = ["layout:"] + [f"  {k}: {v}" for k, v in self.layout.items()]
        lines += ["model:"] + [f"  {k}: {v}" for k, v in self.model.items()]
        lines += ["memory per GPU (GiB, estimates):"]
        lines += [f"  {k}: {v / GIB:.1f}" for k, v in self.memory.items()]
        lines += ["verdict: " + ("consistent, fits" if not self.problems else "NOT consistent")]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def _config(name: str, cfg: Any) -> Any:
    from transformers import AutoConfig, GptOssConfig

    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model import tiny_gptoss_config

    if name == "tiny":
        return tiny_gptoss_config(ByteTokenizer().vocab_size, **dict(cfg.model.tiny))
    if name in KNOWN_ARCHITECTURES:
        return GptOssConfig(**KNOWN_ARCHITECTURES[name])
    if (Path(name) / "config.json").exists():
        return AutoConfig.from_pretrained(name)
    raise ConfigError(f"dry run: cannot read the architecture of {name!r} without downloading it; "
                      f"use a local model dir or one of {sorted(KNOWN_ARCHITECTURES)}")


def _count(config: Any) -> dict[str, int]:
    """Parameter counts from the model built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = model.model.layers
    return {"total": sum(p.numel() for p in model.parameters()),
            "layer": max(sum(p.numel() for p in layer.parameters()) for layer in layers),
            "root": sum(p.numel() for n, p in model.named_parameters() if ".layers." not in n)}


def estimate_memory(counts: dict[str, int], config: Any, cfg: Any, world: int) -> dict[str, float]:
    """Bytes per GPU. Learner (FSDP2 over ``world`` ranks): float32 master weights, AdamW m and v,
    float32 gradients, the reference in the compute dtype (when ``kl_coef > 0``), all sharded;
    gathered compute-dtype parameters of two decoder layers (the current one and the
    prefetched next) plus the root unit (embeddings, head: kept gathered through the pass);
    activations of one micro-batch (``max(micro_batch_tokens, env.max_tokens + 1)`` tokens):
    each layer's input kept (gradient checkpointing) or all of a layer's working set
    (``~(10 H + 3 k I)`` values per token) per layer without it, plus one head chunk.
    Engine: ``gpu_memory_utilization`` of the GPU while awake, a small residue asleep."""
    P, c = counts["total"], 2 if cfg.model.dtype == "bfloat16" else 4
    H, L = config.hidden_size, config.num_hidden_layers
    k, inter = getattr(config, "num_experts_per_tok", 1), config.intermediate_size
    tokens = max(cfg.ppo.micro_batch_tokens or cfg.env.max_tokens + 1, cfg.env.max_tokens + 1)
    per_layer = tokens * (10 * H + 3 * k * inter) * c  # one layer's forward working set
    act = (tokens * H * c * L + 2 * per_layer) if cfg.model.gradient_checkpointing else L * per_layer
    from agentgym.trainer.logprobs import HEAD_CHUNK_BYTES

    mem = {
        "master weights fp32": 4 * P / world,
        "AdamW state fp32": 8 * P / world,
        "gradients fp32": 4 * P / world,
        "KL reference": (c * P / world) if cfg.ppo.kl_coef > 0 else 0.0,
        "gathered params": c * (2 * counts["layer"] + counts["root"]),
        "activations": act + 3 * HEAD_CHUNK_BYTES,
    }
    if cfg.rollout.engine == "vllm":
        util = float(cfg.rollout.engine_kwargs.get("gpu_memory_utilization", 0.3))
        mem["engine awake"] = util * cfg.distributed.gpu_memory_gib * GIB
        mem["engine asleep"] = SLEEP_RESIDUE if cfg.rollout.sleep_level else mem["engine awake"]
    else:
        mem["engine awake"] = mem["engine asleep"] = 0.0
    resident = mem["master weights fp32"] + mem["AdamW state fp32"] + mem["KL reference"] + CUDA_CONTEXT
    mem["peak during rollout"] = resident + mem["engine awake"]
    mem["peak during update"] = (resident + mem["gradients fp32"] + mem["gathered params"]
                                 + mem["activations"] + mem["engine asleep"])
    return mem


def check_engine_checkpoint(name: str) -> None:
    """Refuse to start a weight-synced engine from an MXFP4 checkpoint (module doc)."""
    from agentgym.trainer.mxfp4 import is_mxfp4

    if name in MXFP4_HUB_IDS or is_mxfp4(name):
        raise ConfigError(
            f"rollout.engine_kwargs.model={name!r} is an MXFP4 checkpoint: the engine would hold its "
            "experts as *_blocks/*_scales while the trainer syncs bf16 gate_up_proj/down_proj by name, "
            "so the sync could not update them. Leave engine_kwargs.model unset: the trainer starts "
            "the engine from its own bf16 weights (RUN_DIR/engine_init)")


def make_plan(cfg: Any) -> Plan:
    """Check ``cfg``'s layout and estimate its memory per GPU (see the module doc)."""
    plan = Plan()
    d, r, p = cfg.distributed, cfg.rollout, cfg.ppo
    world = d.nproc or 1
    on_gpu = cfg.model.device == "cuda"
    groups = world // d.rollout_tp if world % d.rollout_tp == 0 else 0
    episodes = r.tasks_per_step * r.samples_per_task
    plan.layout = {
        "processes": f"{world} ({'torchrun --nproc_per_node ' + str(world) if world > 1 else 'one process'})",
        "devices": ", ".join(f"cuda:{i}" for i in range(world)) if on_gpu else cfg.model.device,
        "learner": f"FSDP2 over {world} rank(s): float32 master weights, {cfg.model.dtype} compute",
        "rollout engines": f"{groups} x {r.engine} (tensor parallel {d.rollout_tp})" if groups else "?",
        "episodes per step": f"{episodes} = {r.tasks_per_step} tasks x {r.samples_per_task}",
        "per engine / per rank": (f"{episodes // groups} / {episodes // world} episodes"
                                  if groups and r.tasks_per_step % groups == 0 else "?"),
        "weight sync": f"{cfg.model.dtype} (gathered one parameter at a time)",
        "engine sleep level": r.sleep_level,
    }
    if world % d.rollout_tp:
        plan.problems.append(f"distributed.rollout_tp={d.rollout_tp} does not divide {world} processes")
    elif r.tasks_per_step % groups:
        plan.problems.append(f"rollout.tasks_per_step={r.tasks_per_step} is not a multiple of the "
                             f"{groups} rollout engines")
    elif (episodes // groups) % d.rollout_tp:
        plan.problems.append(f"{episodes // groups} episodes per engine do not split over its "
                             f"{d.rollout_tp} ranks")
    elif p.minibatches > episodes // world:
        plan.problems.append(f"ppo.minibatches={p.minibatches} exceeds the {episodes // world} "
                             "episodes each rank learns on")
    if world > 1 and on_gpu and d.backend == "gloo":
        plan.problems.append("distributed.backend=gloo on CUDA: use nccl (or auto)")
    try:
        from agentgym.trainer.model import check_attention, default_attention

        attn = cfg.model.attn_implementation
        check_attention(default_attention(cfg.model.device) if attn == "auto" else attn, cfg.model.device)
    except ConfigError as e:
        plan.problems.append(str(e))
    kw = r.engine_kwargs
    if r.engine == "vllm":
        if not on_gpu:
            plan.problems.append("rollout.engine=vllm needs model.device=cuda")
        if "model" in kw:
            try:
                check_engine_checkpoint(str(kw["model"]))
            except ConfigError as e:
                plan.problems.append(str(e))
        tp = int(kw.get("tensor_parallel_size", d.rollout_tp))
        if tp != d.rollout_tp:
            plan.problems.append(f"rollout.engine_kwargs.tensor_parallel_size={tp} but "
                                 f"distributed.rollout_tp={d.rollout_tp}: one engine spans rollout_tp ranks")
        if str(kw.get("dtype", cfg.model.dtype)) != cfg.model.dtype:
            plan.problems.append(f"engine dtype {kw.get('dtype')} != model.dtype {cfg.model.dtype}: "
                                 "weights are synced in the compute dtype")
        if r.sleep_level and not kw.get("enable_sleep_mode"):
            plan.problems.append("rollout.sleep_level > 0 needs rollout.engine_kwargs.enable_sleep_mode: true")
    elif r.sleep_level:
        plan.problems.append(f"rollout.sleep_level={r.sleep_level}: only the vllm engine can sleep")
    if p.micro_batch_tokens and p.micro_batch_tokens < cfg.env.max_tokens + 1:
        plan.layout["note"] = (f"episodes up to env.max_tokens={cfg.env.max_tokens} exceed "
                               f"ppo.micro_batch_tokens={p.micro_batch_tokens}: such an episode forms a "
                               "micro-batch of its own (the estimate uses the longer)")
    config = _config(cfg.model.name, cfg)
    counts = _count(config)
    plan.model = {"name": cfg.model.name, "parameters": f"{counts['total'] / 1e9:.2f} B",
                  "largest decoder layer": f"{counts['layer'] / 1e6:.0f} M",
                  "embeddings + head + norm": f"{counts['root'] / 1e6:.0f} M",
                  "layers x hidden x vocab": f"{config.num_hidden_layers} x {config.hidden_size} x "
                                             f"{config.vocab_size}"}
    plan.memory = estimate_memory(counts, config, cfg, world)
    if r.engine == "vllm":
        c = 2 if cfg.model.dtype == "bfloat16" else 4
        weights = c * counts["total"] / d.rollout_tp
        kv = plan.memory["engine awake"] - weights - CUDA_CONTEXT
        per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * c / d.rollout_tp
        plan.memory["engine weights (bf16 shard)"] = weights
        plan.memory["engine KV cache"] = max(kv, 0.0)
        plan.layout["KV cache capacity"] = f"~{max(kv, 0) / per_token / 1e3:.0f}k tokens per engine"
        if kv < 2 * GIB:
            plan.problems.append(f"the engine's share ({plan.memory['engine awake'] / GIB:.1f} GiB) leaves "
                                 f"{kv / GIB:.1f} GiB for the KV cache after its weights; raise "
                                 "gpu_memory_utilization or rollout_tp")
    limit = 0.95 * d.gpu_memory_gib * GIB
    for phase in ("peak during rollout", "peak during update"):
        if on_gpu and plan.memory[phase] > limit:
            plan.problems.append(f"{phase}: {plan.memory[phase] / GIB:.1f} GiB > 95% of "
                                 f"{d.gpu_memory_gib:g} GiB per GPU")
    return plan


def plan_json(plan: Plan) -> str:
    return json.dumps({"layout": plan.layout, "model": plan.model,
                       "memory_gib": {k: round(v / GIB, 2) for k, v in plan.memory.items()},
                       "problems": plan.problems}, indent=1, default=str)

