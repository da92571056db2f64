"""The dry run: is a recipe's process layout consistent, and does it fit in GPU and host memory?

    agentgym-train --dry-run --config gptoss-20b-8gpu-vllm        # prints the plan, exit 0 / 2

Nothing is loaded and no GPU is needed (it runs in CI): the model is built on the meta device
(exact parameter count; hub ids of known architectures need no download) and the layout is
checked against the rules the trainer enforces at run time:

* ``distributed.nproc`` ranks, ``distributed.rollout_tp`` of them per rollout engine: the
  engines split ``rollout.tasks_per_step``, the ranks of one engine split its episodes, LoRA
  runs in one process (:func:`~agentgym.trainer.distributed.layout_problems`, the same function
  a real start under torchrun refuses them with);
* a vLLM engine is built from the trainer's own config and filled with its bf16 weights in
  memory, never started from an MXFP4 checkpoint (its expert parameters are ``*_blocks``/
  ``*_scales``, the trainer's ``gate_up_proj``/``down_proj``: a sync by name cannot update
  them); its tensor-parallel size is ``rollout_tp`` and its dtype the trainer's compute dtype;
  sleeping needs sleep mode on;
* memory per GPU in both phases (estimates, see :func:`estimate_memory`): rollout (learner
  state resident + the engine's share of the GPU) and update (learner state + gradients +
  gathered parameters + activations + the sleeping engine's residue);
* host memory against this machine's (:func:`host_memory`): the episodes held at once, plus
  the learner when it runs on the CPU. A real start checks it too (:func:`memory_problems`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError

from .distributed import Layout, layout_problems
from .model.gptoss import check_attention, default_attention, tiny_gptoss_config
from .model.logprobs import HEAD_CHUNK_BYTES, head_rows
from .model.lora import add_adapters
from .model.mxfp4 import is_mxfp4
from .plan_lora import frozen_base_saving, hf_kv_bytes, lora_memory

__all__ = ["EPISODE_BYTES_PER_TOKEN", "KNOWN_ARCHITECTURES", "MXFP4_HUB_IDS", "Plan", "check_engine_checkpoint",
           "count_parameters", "estimate_memory", "host_memory", "layer_activation_bytes", "machine_memory",
           "make_plan", "memory_problems"]

GIB = 1 << 30
# Public config.json values of the hub models (GptOssConfig's defaults are gpt-oss-120b's).
KNOWN_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "openai/gpt-oss-20b": {"num_hidden_layers": 24, "num_local_experts": 32},
    "openai/gpt-oss-120b": {"num_hidden_layers": 36, "num_local_experts": 128},
}
MXFP4_HUB_IDS = frozenset(KNOWN_ARCHITECTURES)  # both ship MXFP4 experts
CUDA_CONTEXT = 1.0 * GIB  # per process, CUDA/NCCL context and allocator slack
SLEEP_RESIDUE = 0.5 * GIB  # what a sleeping vLLM keeps (level 1 and 2)
# Host bytes per token of an episode held in memory: the record's token ids, policy mask and
# behaviour log-probs as Python lists (~76 bytes), or the step's padded (B, T) tensors (int64
# ids, masks, five float32 columns: ~33). An estimate that refuses only the absurd.
EPISODE_BYTES_PER_TOKEN = 64


@dataclass
class Plan:
    """The dry run's findings: layout, sizes (bytes), and problems (empty = consistent)."""

    layout: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = ["layout:"] + [f"  {k}: {v}" for k, v in self.layout.items()]
        lines += ["model:"] + [f"  {k}: {v}" for k, v in self.model.items()]
        lines += ["memory per GPU (GiB, estimates):"]
        lines += [f"  {k}: {v / GIB:.1f}" for k, v in self.memory.items()]
        lines += [f"host memory (GiB, estimates; this machine has {machine_memory() / GIB:.1f}):"]
        lines += [f"  {k}: {_gib(v)}" for k, v in self.host.items()]
        lines += ["verdict: " + ("consistent, fits" if not self.problems else "NOT consistent")]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def _config(name: str, cfg: Any) -> Any:
    from transformers import AutoConfig, GptOssConfig

    from agentgym.tokenizers import ByteTokenizer

    if name == "tiny":
        return tiny_gptoss_config(ByteTokenizer().vocab_size, **dict(cfg.model.tiny))
    if name in KNOWN_ARCHITECTURES:
        return GptOssConfig(**KNOWN_ARCHITECTURES[name])
    if (Path(name) / "config.json").exists():
        return AutoConfig.from_pretrained(name)
    raise ConfigError(f"dry run: cannot read the architecture of {name!r} without downloading it; "
                      f"use a local model dir or one of {sorted(KNOWN_ARCHITECTURES)}")


def count_parameters(config: Any, lora: Any = None) -> dict[str, int]:
    """Parameter counts from the model built on the meta device; with ``lora`` (a rank > 0
    ``LoRAConfig``) PEFT's adapters are injected there too: ``adapters`` is their exact count,
    ``largest adapter`` the largest one, ``expert weights`` the largest layer's fused expert
    weights (what PEFT materialises as W + BA when the experts are adapted)."""
    import torch
    from transformers import AutoModelForCausalLM

    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = model.model.layers
    counts = {"total": sum(p.numel() for p in model.parameters()),
              "layer": max(sum(p.numel() for p in layer.parameters()) for layer in layers),
              "root": sum(p.numel() for n, p in model.named_parameters() if ".layers." not in n),
              "largest": max(p.numel() for p in model.parameters()),
              "adapters": 0, "largest adapter": 0, "expert weights": 0}
    if lora is not None and lora.rank:
        experts = max(sum(p.numel() for n, p in layer.mlp.experts.named_parameters()
                          if n in ("gate_up_proj", "down_proj")) for layer in layers) if lora.experts else 0
        with torch.device("meta"):
            add_adapters(model, lora)
        adapters = [p.numel() for p in model.parameters() if p.requires_grad]
        counts |= {"adapters": sum(adapters), "largest adapter": max(adapters), "expert weights": experts}
    return counts


def layer_activation_bytes(config: Any, *, precision: str, attention: str, experts: str, seq: int) -> float:
    """Bytes one GPT-OSS decoder layer keeps for its backward pass, per token of a micro-batch
    whose rows are ``seq`` tokens long.

    Counted tensor by tensor from what autograd saves (``torch.autograd.graph.saved_tensors_hooks``
    on transformers 5.19's ``GptOssDecoderLayer``), per ``precision``:

    * ``float32``: everything in float32;
    * ``autocast`` (bf16, one process): the residual stream and norms stay float32 (the weights
      are float32), each linear saves its own bf16 cast of its input, the eager softmax is
      float32 plus a bf16 copy, and the eager experts' bias adds promote to float32;
    * ``bf16`` (FSDP2 mixed precision: bf16 parameters, no autocast): bf16 except the norms'
      float32 upcast.

    ``attention``: ``eager`` keeps the full (T, T+1) softmax whatever the sliding window;
    ``flex`` (GPU) keeps q, k, v, the output and its log-sum-exp, and the sink correction's
    float32 factor and output. ``experts``: ``eager`` (CPU loop) or ``grouped`` (GPU), per token
    and chosen expert (k per token): its input, the gate/up output, the clamped SwiGLU's
    intermediates, the down projection's output and its weighted copy. Measured against real
    steps on CPU (eager attention and experts): bench/trainer_memory.py --mode plan.
    """
    H, Im = config.hidden_size, config.intermediate_size
    k = getattr(config, "num_experts_per_tok", 1)
    Hq, Hkv = config.num_attention_heads, config.num_key_value_heads
    D = getattr(config, "head_dim", None) or H // Hq
    T = seq
    if precision == "float32":
        norms = 2 * 4 * (3 * H + 1)
        attn = 16 * Hq * D + 4 * Hq * (T + 1) if attention == "eager" else \
            4 * (2 * Hq * D + 2 * Hkv * D) + 4 * 2 * Hq + 4 * Hq * D
        mlp = 12 * k + k * (12 * H + 28 * Im + 12)
        extra = 4 * D + 8 * Hq
    elif precision == "autocast":
        norms = 2 * 4 * (2 * H + 1) + 4 * H + 2 * H  # + 3 casts for q, k, v and 1 for the router
        attn = 8 * Hq * D + 4 * Hq * (T + 1) + 2 * Hq * T if attention == "eager" else \
            2 * (2 * Hq * D + 2 * Hkv * D) + 4 * 2 * Hq + 4 * Hq * D
        mlp = 10 * k + k * (10 * H + 26 * Im + 10) if experts == "eager" else k * (8 * H + 14 * Im + 18)
        extra = 4 * D + 8 * Hq
    else:  # bf16 parameters, no autocast
        norms = 2 * (4 * (2 * H + 1) + 2 * H)
        attn = 8 * Hq * D + 2 * Hq * (T + 1) if attention == "eager" else \
            2 * (2 * Hq * D + 2 * Hkv * D) + 4 * 2 * Hq + 4 * Hq * D
        mlp = 10 * k + k * (6 * H + 14 * Im + 10) if experts == "eager" else k * (6 * H + 14 * Im + 18)
        extra = 2 * D + 8 * Hq
    return float(norms + attn + mlp + extra)


def engine_memory(cfg: Any, largest: int, sync_bytes: int) -> dict[str, float]:
    """A vLLM engine's share of the GPU (``gpu_memory_utilization``, its weights and KV cache), awake
    and asleep, and the in-memory weight sync's buffers: one parameter of ``largest`` values at
    ``sync_bytes`` each, gathered or (LoRA) merged, and one bucket. Zero for the hf engine."""
    if cfg.rollout.engine != "vllm":
        return {"engine awake": 0.0, "engine asleep": 0.0, "weight sync buffers": 0.0}
    awake = float(cfg.rollout.engine_kwargs.get("gpu_memory_utilization", 0.3)) * cfg.distributed.gpu_memory_gib * GIB
    bucket = float(cfg.rollout.engine_kwargs.get("sync_bucket_mb", 256)) * (1 << 20)
    return {"engine awake": awake, "engine asleep": SLEEP_RESIDUE if cfg.rollout.sleep_level else awake,
            "weight sync buffers": sync_bytes * largest + bucket}


def estimate_memory(counts: dict[str, int], config: Any, cfg: Any, world: int) -> dict[str, float]:
    """Bytes per device (see the module doc). Learner (FSDP2 over ``world`` ranks): float32
    master weights, AdamW m and v, float32 gradients, the reference in the compute dtype (when
    ``cfg.keeps_reference()``), all sharded; the compute-dtype weights in use (FSDP2: two gathered
    decoder layers plus the root unit, kept through the pass; one process under bf16 autocast: autocast's
    bf16 copy of every weight, alive until the backward); activations of one micro-batch
    (``max(micro_batch_tokens, env.max_tokens + 1)`` tokens, rows of ``env.max_tokens + 1``):
    :func:`layer_activation_bytes` per layer, or with gradient checkpointing each layer's input
    (float32 under autocast: the residual stream is float32) plus the one layer being recomputed,
    plus the output head's chunk. Peaks: the update's at the start of the backward (activations,
    the head's gradient) or in AdamW's step (gradients plus its temporary: the square root of
    the second moment of every parameter at once with the foreach implementation CUDA uses, of
    the largest parameter with the per-tensor one on CPU); the rollout's with the learner state
    resident (gradients freed before the engine wakes). Engine: ``gpu_memory_utilization`` of
    the GPU while awake, a small residue asleep; the hf engine's KV cache (``plan_lora.hf_kv_bytes``)
    during the rollout. With ``model.lora.rank`` > 0: ``plan_lora.lora_memory``."""

    P = counts["total"]
    bf16 = cfg.model.dtype == "bfloat16"
    c = 2 if bf16 else 4
    on_gpu = cfg.model.device == "cuda"
    lora = cfg.model.lora.rank > 0
    # LoRA holds the frozen base in the compute dtype: bf16 weights under autocast compute like FSDP2's
    precision = "float32" if not bf16 else ("bf16" if world > 1 or lora else "autocast")
    attn = cfg.model.attn_implementation
    attn = default_attention(cfg.model.device) if attn == "auto" else attn
    attention = "eager" if attn == "eager" else "flex"
    H, L, V = config.hidden_size, config.num_hidden_layers, config.vocab_size
    seq = cfg.env.max_tokens + 1
    tokens = max(cfg.ppo.micro_batch_tokens or seq, seq)
    per_layer = tokens * layer_activation_bytes(config, precision=precision, attention=attention,
                                                experts="grouped" if on_gpu else "eager", seq=seq)
    if lora:
        per_layer -= tokens * frozen_base_saving(config, precision=precision, experts=cfg.model.lora.experts)
    residual = 2 if precision == "bf16" else 4  # bytes per value of the residual stream
    ckpt = cfg.model.gradient_checkpointing
    layers_act = L * tokens * H * residual if ckpt else L * per_layer  # kept through the backward
    rows = min(tokens, head_rows(HEAD_CHUNK_BYTES, V))
    # one chunk of logits (measured, bench/trainer_memory.py): the fused head (CUDA) keeps two float32
    # (n, V) arrays at a time (and bf16 logits under autocast), the chunked one (CPU) four with the
    # entropy (logits, log-softmax, its exp, their product)
    per_logit = (12 if bf16 else 8) if on_gpu else 16
    head = rows * V * per_logit
    root = tokens * H * (residual + 4 * 3)  # embeddings' output, the final norm's tensors
    if world > 1:
        weights_in_use = float(c * (2 * counts["layer"] + counts["root"]))
    else:
        weights_in_use = c * P if bf16 else 0.0  # autocast's bf16 copies (cached until the backward)
    adam_temp = 4 * (P / world if on_gpu else counts["largest"])
    if lora:
        return lora_memory(counts, config, cfg, c=c, per_layer=per_layer, root=root, head=head, tokens=tokens,
                           context=CUDA_CONTEXT if on_gpu else 0.0,
                           engine=engine_memory(cfg, counts["largest"], 4))  # merged in float32
    mem = {
        "master weights fp32": 4 * P / world,
        "AdamW state fp32": 8 * P / world,
        "gradients fp32": 4 * P / world,
        "AdamW step temporary": adam_temp,
        "KL reference": (c * P / world) if cfg.keeps_reference() else 0.0,
        "weights in compute dtype": weights_in_use,
        # with checkpointing the head's backward and a layer's recomputation come one after the other
        "activations": layers_act + root + (max(head, per_layer) if ckpt else head),
    }
    mem |= engine_memory(cfg, counts["largest"], c)
    context = CUDA_CONTEXT if on_gpu else 0.0
    resident = mem["master weights fp32"] + mem["AdamW state fp32"] + mem["KL reference"] + context
    if cfg.rollout.engine == "hf":
        mem["engine KV cache (hf)"] = hf_kv_bytes(config, cfg)
    mem["peak during rollout"] = (resident + mem["engine awake"] + mem["weight sync buffers"]
                                  + mem.get("engine KV cache (hf)", 0.0))
    head_grad = 4 * counts["root"] / world  # the first gradients, before any activation is freed
    backward = mem["weights in compute dtype"] + mem["activations"] + head_grad
    step = mem["gradients fp32"] + mem["AdamW step temporary"]
    mem["peak during update"] = resident + max(backward, step) + mem["engine asleep"]
    return mem


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}" if n < 1e5 * GIB else f"{n / GIB:.3g}"


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's RAM, or its cgroup's limit if lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def host_memory(cfg: Any, learner_peak: float) -> dict[str, float]:
    """Bytes of host memory (see :data:`EPISODE_BYTES_PER_TOKEN`): the most episodes held at
    once (a PPO step's, a warm-start step's demonstrations or an evaluation's), each
    ``env.max_tokens`` long, plus ``learner_peak`` (the learner's peak when it runs on the CPU)."""
    episodes = max(cfg.rollout.tasks_per_step * cfg.rollout.samples_per_task,
                   cfg.sft.batch_size if cfg.sft.steps else 0,
                   (cfg.log.eval_episodes_final or cfg.log.eval_episodes) * cfg.log.eval_samples)
    held = float(episodes) * (cfg.env.max_tokens + 1) * EPISODE_BYTES_PER_TOKEN
    return {"episodes held at once": held, "learner (on the CPU)": learner_peak,
            "total": held + learner_peak}


def host_problems(host: dict[str, float]) -> list[str]:
    """The plan's host memory against :func:`machine_memory` (90% of it: room for Python,
    the envs and the page cache)."""
    have = machine_memory()
    if host["total"] <= 0.9 * have:
        return []
    return [f"host memory: the plan needs {_gib(host['total'])} GiB ({_gib(host['episodes held at once'])} "
            f"for the episodes held at once, {_gib(host['learner (on the CPU)'])} for the learner on the "
            f"CPU), more than 90% of this machine's {have / GIB:.1f} GiB; fix: fewer episodes per step "
            "(rollout.tasks_per_step, rollout.samples_per_task, sft.batch_size), a shorter env.max_tokens "
            "or a smaller model"]


def memory_problems(cfg: Any) -> list[str]:
    """What a real start checks before it builds anything: the host memory of :func:`make_plan`
    (the learner's share only when the model's architecture can be read without a download)."""
    learner = 0.0
    if cfg.model.device == "cpu":
        try:
            config = _config(cfg.model.name, cfg)
        except ConfigError:
            config = None
        if config is not None:
            counts = count_parameters(config, cfg.model.lora)
            est = estimate_memory(counts, config, cfg, cfg.distributed.nproc or 1)
            # the learner's own share: the engine's is planned for a GPU (a CPU engine holds its own
            # kv_cache_gib, outside this plan)
            learner = est["peak during update"] - est["engine asleep"]
    return host_problems(host_memory(cfg, learner))


def check_engine_checkpoint(name: str) -> None:
    """Refuse to start a weight-synced engine from an MXFP4 checkpoint (module doc)."""

    if name in MXFP4_HUB_IDS or is_mxfp4(name):
        raise ConfigError(
            f"rollout.engine_kwargs.model={name!r} is an MXFP4 checkpoint: the engine would hold its "
            "experts as *_blocks/*_scales while the trainer syncs bf16 gate_up_proj/down_proj by name, "
            "so the sync could not update them. Leave engine_kwargs.model unset: the trainer builds "
            "the engine from its own config and fills it with its bf16 weights in memory")


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
        "weight sync": f"{cfg.model.dtype}, in memory (gathered one parameter at a time)"
                       if r.engine == "vllm" else f"{cfg.model.dtype} (gathered one parameter at a time)",
        "engine sleep level": r.sleep_level,
        "GPU memory": f"{d.gpu_memory_gib:g} GiB per GPU (distributed.gpu_memory_gib)",
    }
    lora = cfg.model.lora
    if lora.rank:
        plan.layout["learner"] = (f"one process, LoRA rank {lora.rank} on {', '.join(lora.targets)}"
                                  f"{' + experts' if lora.experts else ''}: frozen {cfg.model.dtype} base, "
                                  "float32 adapters + AdamW")
        plan.layout["weight sync"] = ("none: the hf engine runs the learner's own model (adapters active)"
                                      if r.engine == "hf" else "the base with the adapters merged in, "
                                      "one tensor at a time in float32, into the engine's own copy")
    plan.problems += layout_problems(Layout.of(cfg), world)  # the rules a real start refuses
    try:
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
    counts = count_parameters(config, cfg.model.lora)
    plan.model = {"name": cfg.model.name, "parameters": f"{counts['total'] / 1e9:.2f} B",
                  "largest decoder layer": f"{counts['layer'] / 1e6:.0f} M",
                  "embeddings + head + norm": f"{counts['root'] / 1e6:.0f} M",
                  "layers x hidden x vocab": f"{config.num_hidden_layers} x {config.hidden_size} x "
                                             f"{config.vocab_size}"}
    if lora.rank:
        plan.model["adapters (trained)"] = f"{counts['adapters'] / 1e6:.1f} M"
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
    plan.host = host_memory(cfg, plan.memory["peak during update"] if not on_gpu else 0.0)
    plan.problems += host_problems(plan.host)
    limit = 0.95 * d.gpu_memory_gib * GIB
    for phase in ("peak during rollout", "peak during update"):
        if on_gpu and plan.memory[phase] > limit:
            big = max((k for k in plan.memory if not k.startswith("peak")), key=plan.memory.__getitem__)
            plan.problems.append(f"{phase}: {plan.memory[phase] / GIB:.1f} GiB > 95% of "
                                 f"{d.gpu_memory_gib:g} GiB per GPU (largest part: {big}, "
                                 f"{plan.memory[big] / GIB:.1f} GiB)")
    return plan
