"""GPT-OSS-20B on one GPU, checked in one short run: five steps, each timed and guarded.

    bash bench/gpu_check.sh                          # on a GPU machine: results in $OUT (or bench/out/gpu-check)
    python bench/gpu_check.py --dry --out /tmp/gc    # the same steps on CPU at tiny shapes (the wiring)

Steps, in the order they run (an error in one is recorded and the next still runs;
``results.json`` and ``results.md`` are rewritten after each):

* ``attention``: the sink-aware flex attention, forward and backward (q, k, v, sinks), against
  transformers' eager GPT-OSS attention in float32 at the real head shapes (64 query / 8 KV heads
  of dim 64), full and sliding-window (128) masks; plus the bf16 forward's error;
* ``mfu``: the learner step of bench/trainer_gpu_mfu.py (``policy_forward`` + backward + AdamW) at
  GPT-OSS-20B widths with fewer layers, full fine-tune and LoRA, bf16; tokens/s and MFU with the
  FLOP count stated in the output (:data:`FLOPS_FORMULA`);
* ``lora_ppo``: one LoRA PPO step (old and reference log-probs, clipped surrogate + k3 KL, AdamW on
  the adapters) on the real GPT-OSS-20B shape with random weights, with as many of its 24 layers
  as the trainer's memory plan fits on the device (trainer/plan.py's ``estimate_memory`` for the
  step's own TrainConfig, :func:`train_config`); the measured peak against the plan's, tokens/s;
* ``engine_logprobs``: the hf engine's sampled log-probs against the learner's, both bf16, through
  the mismatch doctor (trainer/doctor.py): k3, mean and max |dlogp|, routing agreement;
* ``gpu_tests``: ``pytest -m gpu`` over the test files that carry the ``gpu`` mark.

``--dry`` runs the same functions on CPU with a tiny GPT-OSS (eager attention: the learner's flex
kernel needs CUDA; the attention step runs flex's CPU fallback) to check the wiring without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
FLOPS_FORMULA = (
    "model FLOPs per token: full fine-tune 6*N + A; LoRA 4*N + 6*N_lora + A (forward 2*N, backward 2*N for "
    "the input gradients; frozen weights get no weight gradient, the adapters all three). N = active "
    "matmul parameters per token: q, k, v, o projections, the router, the chosen experts' gate/up "
    "and down projections per layer (GPT-OSS-20B: 4 of 32), and the output head (embeddings are lookups, not counted). "
    "A = attention scores and values, 12*ctx*n_heads*head_dim per layer (4x forward, x3 with the "
    "backward), ctx = (seq+1)/2 on full-attention layers and min(window, (seq+1)/2) on sliding-window "
    "layers (GPT-OSS-20B: window 128). MFU = achieved model FLOPs / the GPU's dense bf16 peak."
)


@dataclass(frozen=True)
class Setup:
    """Everything that differs between the GPU run and the dry run (the code path does not)."""

    device: str
    dtype: torch.dtype
    attn: str  # the learner's attention implementation
    config: Callable[[int, int], Any]  # (layers, vocab) -> GptOssConfig
    vocab: int
    max_layers: int  # the real model's depth (GPT-OSS-20B: 24; the dry run's tiny model: 4)
    mfu_layers: int
    batch: int
    seq: int
    steps: int
    warmup: int
    ppo_batch: int
    ppo_seq: int
    lora_rank: int
    heads: tuple[int, int, int, int, int, int]  # attention check: B, Hq, Hkv, T, D, window
    engine_layers: int
    episodes: int
    new_tokens: int
    max_turns: int  # engine step: MathCalc-v1 turns per episode
    tokenizer: str  # o200k_harmony (GPT-OSS's own, when openai_harmony is installed) or byte
    ppo_layers: int = 0  # LoRA PPO step: 0 = as many as the memory estimate fits (plan_layers)


def _layer_types(n: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


def gptoss_20b_config(layers: int, vocab: int) -> Any:
    """GPT-OSS-20B's public config (hidden 2880, 64/8 heads of 64, 32 experts top-4, window 128)
    with ``layers`` of its 24 decoder layers."""
    from transformers import GptOssConfig

    from agentgym.trainer.plan import KNOWN_ARCHITECTURES

    kw = {**KNOWN_ARCHITECTURES["openai/gpt-oss-20b"], "num_hidden_layers": layers,
          "layer_types": _layer_types(layers), "vocab_size": vocab}
    return GptOssConfig(**kw)


def tiny_config(layers: int, vocab: int) -> Any:
    from agentgym.trainer.model.gptoss import tiny_gptoss_config

    return tiny_gptoss_config(vocab, num_hidden_layers=layers, head_dim=16, sliding_window=8)


GPU = Setup(device="cuda", dtype=torch.bfloat16, attn="agentgym_flex", config=gptoss_20b_config, vocab=201_088,
            max_layers=24, mfu_layers=4, batch=4, seq=2048, steps=5, warmup=2, ppo_batch=4, ppo_seq=1024,
            lora_rank=16, heads=(1, 64, 8, 2048, 64, 128), engine_layers=2, episodes=4, new_tokens=48, max_turns=2,
            tokenizer="o200k_harmony")
DRY = Setup(device="cpu", dtype=torch.bfloat16, attn="eager", config=tiny_config, vocab=264,
            max_layers=4, mfu_layers=2, batch=2, seq=48, steps=1, warmup=1, ppo_batch=2, ppo_seq=48,
            lora_rank=4, heads=(2, 4, 2, 24, 16, 6), engine_layers=2, episodes=2, new_tokens=6, max_turns=2,
            tokenizer="byte")


def _bench(name: str) -> Any:
    """A sibling bench script as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sync(s: Setup) -> None:
    if s.device == "cuda":
        torch.cuda.synchronize()


def _reset_peak(s: Setup) -> None:
    gc.collect()
    if s.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(s: Setup) -> float:
    """CUDA: the allocator's peak since the last reset; CPU: the process's peak RSS so far."""
    if s.device == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def _timed(s: Setup, step: Callable[[], Any], steps: int, warmup: int) -> float:
    """Seconds per call of ``step`` after ``warmup`` calls (compiles, allocator warm-up)."""
    for _ in range(warmup):
        step()
    _sync(s)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(s)
    return (time.perf_counter() - t0) / steps


def build_model(s: Setup, config: Any, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised GPT-OSS in ``s.dtype`` on ``s.device``, with the learner's
    attention and expert implementations."""
    from transformers import GptOssForCausalLM

    from agentgym.trainer.model.attention import set_attention
    from agentgym.trainer.model.gptoss import use_memory_efficient_experts

    torch.manual_seed(seed)
    with torch.device(s.device):
        model = GptOssForCausalLM._from_config(config, dtype=s.dtype)
    set_attention(model, s.attn)
    use_memory_efficient_experts(model)
    return model.train()


def _lora(s: Setup) -> Any:
    """The adapters the MFU and PPO steps add: :func:`train_config`'s."""
    return train_config(s).model.lora


# -- (d) attention -------------------------------------------------------------------------------


class _Heads(torch.nn.Module):
    """The two attributes transformers' eager GPT-OSS attention reads from its module."""

    def __init__(self, sinks: torch.Tensor, groups: int) -> None:
        super().__init__()
        self.sinks = torch.nn.Parameter(sinks)
        self.num_key_value_groups = groups


def step_attention(s: Setup, out: Path) -> dict[str, Any]:
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    from agentgym.trainer.model.attention import causal_block_mask, dense_sink_attention, flex_sink_attention

    B, HQ, HKV, T, D, W = s.heads
    res: dict[str, Any] = {"shape": {"batch": B, "q_heads": HQ, "kv_heads": HKV, "seq": T, "head_dim": D},
                           "kernel": "flex_sink_attention (forward and backward)" if s.device == "cuda" else
                           "flex_sink_attention (forward; flex has no CPU backward) + dense_sink_attention (backward)"}
    ok = True
    for window in (None, W):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, h, T, D, generator=g) for h in (HQ, HKV, HKV))
        sinks = torch.randn(HQ, generator=g)
        dout = torch.randn(B, HQ, T, D, generator=g).to(s.device)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (j <= i) & ((i - j < window) if window else True)
        additive = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None].to(s.device)
        mask = causal_block_mask(T, T, window, torch.device(s.device))
        a = [x.to(s.device).requires_grad_() for x in (q, k, v, sinks)]
        if s.device == "cuda":
            got = flex_sink_attention(*a, block_mask=mask, scale=D**-0.5)  # (B, H, T, D)
        else:  # flex has no backward on CPU: the trainer's dense sink attention carries the gradients
            got = dense_sink_attention(*a, allowed[None, None].expand(B, 1, T, T).to(s.device), scale=D**-0.5)
        ga = torch.autograd.grad((got * dout).sum(), a)
        b = [x.to(s.device).requires_grad_() for x in (q, k, v)]
        heads = _Heads(sinks.to(s.device), HQ // HKV)
        ref, _ = eager_attention_forward(heads, *b, additive, scaling=D**-0.5)  # (B, T, H, D)
        ref = ref.transpose(1, 2)
        gb = torch.autograd.grad((ref * dout).sum(), [*b, heads.sinks])
        with torch.no_grad():
            flex = flex_sink_attention(*(x.detach() for x in a), block_mask=mask, scale=D**-0.5)
            bf = flex_sink_attention(*(x.detach().to(torch.bfloat16) for x in a[:3]), a[3].detach(),
                                     block_mask=mask, scale=D**-0.5)
        fwd = max(float((got - ref).abs().max()), float((flex - ref).abs().max()))
        grads = {n: float((x - y).abs().max() / y.abs().max().clamp_min(1e-12))
                 for n, x, y in zip(("q", "k", "v", "sinks"), ga, gb)}
        name = f"window_{window}" if window else "full"
        res[name] = {"fwd_max_abs_fp32": fwd, "grad_max_rel_fp32": grads,
                     "fwd_max_abs_bf16": float((bf.float() - ref).abs().max())}
        ok = ok and fwd <= 1e-3 and max(grads.values()) <= 1e-3
    res["check"] = "pass" if ok else "fail"
    res["bounds"] = "fp32: forward max |diff| <= 1e-3, each gradient's max |diff| / max |ref| <= 1e-3"
    w = res[f"window_{W}"]
    res["summary"] = (f"fwd max|d| {res['full']['fwd_max_abs_fp32']:.1e} (full) {w['fwd_max_abs_fp32']:.1e} "
                      f"(window); grad rel {max(res['full']['grad_max_rel_fp32'].values()):.1e} / "
                      f"{max(w['grad_max_rel_fp32'].values()):.1e}")
    return res


# -- (b) learner MFU -----------------------------------------------------------------------------


def _mfu_run(s: Setup, config: Any, lora: bool, peak: float | None) -> dict[str, Any]:
    from agentgym.trainer.model.logprobs import policy_forward

    mfu_bench = _bench("trainer_gpu_mfu")
    model = build_model(s, config)
    total = sum(p.numel() for p in model.parameters())
    if lora:
        from agentgym.trainer.model.lora import add_adapters

        add_adapters(model, _lora(s), seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-6, fused=s.device == "cuda")
    ids = torch.randint(0, config.vocab_size, (s.batch, s.seq), device=s.device)
    mask = torch.ones_like(ids)

    def step() -> None:
        out = policy_forward(model, ids, mask, with_entropy=True)
        loss = -(out.logprobs.sum() + 0.01 * out.entropy.sum()) / ids.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    _reset_peak(s)
    dt = _timed(s, step, s.steps, s.warmup)
    matmul, attn = mfu_bench.flop_terms(config, s.seq)
    per_token = (4.0 * matmul + 6.0 * trainable + attn) if lora else (6.0 * matmul + attn)
    tokens = s.batch * s.seq
    achieved = per_token * tokens / dt / 1e12
    return {"params": total, "trainable": trainable, "step_s": round(dt, 4), "tokens_per_s": round(tokens / dt, 1),
            "flops_per_token": per_token, "achieved_tflops": round(achieved, 2),
            "mfu": round(achieved / peak, 4) if peak else None, "peak_mem_gib": _peak_gib(s)}


def step_mfu(s: Setup, out: Path) -> dict[str, Any]:
    mfu_bench = _bench("trainer_gpu_mfu")
    config = s.config(s.mfu_layers, s.vocab)
    name = torch.cuda.get_device_name() if s.device == "cuda" else ""
    peak = next((v for k, v in mfu_bench.PEAK_BF16_TFLOPS.items() if k in name), None)
    res: dict[str, Any] = {"layers": s.mfu_layers, "batch": s.batch, "seq": s.seq, "dtype": str(s.dtype),
                           "attn": s.attn, "lora_rank": s.lora_rank, "peak_tflops": peak,
                           "flops_formula": FLOPS_FORMULA}
    res["full"] = _mfu_run(s, config, lora=False, peak=peak)
    _reset_peak(s)
    res["lora"] = _mfu_run(s, config, lora=True, peak=peak)
    f, lo = res["full"], res["lora"]
    res["summary"] = (f"full {f['tokens_per_s']:.0f} tok/s MFU {f['mfu']}; "
                      f"LoRA {lo['tokens_per_s']:.0f} tok/s MFU {lo['mfu']}")
    return res


# -- (c) LoRA PPO step on the real shape ---------------------------------------------------------


def train_config(s: Setup) -> Any:
    """The TrainConfig of the LoRA PPO step as it runs: one process on ``s.device``, the base in
    bf16 with ``s.lora_rank`` adapters on the default targets (the step's :func:`_lora`), the step's
    attention, no gradient checkpointing, one micro-batch of ``ppo_batch`` rows of ``ppo_seq``
    tokens (``env.max_tokens + 1`` each), the hf engine (it shares the learner's weights)."""
    from agentgym.trainer.config import load_config

    B, T = s.ppo_batch, s.ppo_seq
    return load_config(None, [
        f"model.device={s.device}", "model.dtype=bfloat16", f"model.attn_implementation={s.attn}",
        "model.gradient_checkpointing=false", f"model.lora.rank={s.lora_rank}",
        f"env.max_tokens={T - 1}", f"ppo.micro_batch_tokens={B * T}", "rollout.engine=hf",
        "rollout.tasks_per_step=1", f"rollout.samples_per_task={B}", "ppo.minibatches=1", "sft.steps=0",
        "controls=[]"])


def plan_memory(s: Setup, layers: int, budget: float) -> dict[str, float]:
    """trainer/plan.py's estimate (:func:`estimate_memory`, bytes by part) of the LoRA PPO step
    with ``layers`` decoder layers of the real model; the step compares its measured peak with the
    plan's ``peak during update``."""
    from agentgym.trainer.plan import count_parameters, estimate_memory

    cfg = train_config(s)
    config = s.config(layers, s.vocab)
    mem = estimate_memory(count_parameters(config, cfg.model.lora), config, cfg, 1)
    mem["budget"] = budget
    return mem


def device_budget(s: Setup) -> float:
    """90% of the device's memory (CUDA: the GPU's; CPU: the machine's)."""
    from agentgym.trainer.plan import machine_memory

    total = torch.cuda.get_device_properties(0).total_memory if s.device == "cuda" else machine_memory()
    return 0.9 * total


def plan_layers(s: Setup) -> tuple[int, dict[str, float]]:
    """The most of the real model's layers whose planned update peak fits the budget (0 when none does)."""
    budget = device_budget(s)
    for layers in range(s.max_layers, 0, -1):
        mem = plan_memory(s, layers, budget)
        if mem["peak during update"] <= budget:
            return layers, mem
    return 0, plan_memory(s, 1, budget)


def step_lora_ppo(s: Setup, out: Path) -> dict[str, Any]:
    from agentgym.trainer.algo.ppo import kl_estimate, masked_mean, ppo_policy_loss
    from agentgym.trainer.model.logprobs import policy_forward
    from agentgym.trainer.model.lora import AdaptersOff, add_adapters
    from agentgym.trainer.plan import CUDA_CONTEXT

    layers, mem = plan_layers(s)
    if s.ppo_layers:  # the command line's choice (--ppo-layers), the estimate kept for comparison
        layers, mem = s.ppo_layers, plan_memory(s, s.ppo_layers, device_budget(s))
    gib = {k: round(v / 2**30, 2) for k, v in mem.items()}
    if not layers:
        raise MemoryError(f"not even one layer fits: estimate {gib}")
    _reset_peak(s)
    model = build_model(s, s.config(layers, s.vocab))
    peft = add_adapters(model, _lora(s), seed=0)
    ref = AdaptersOff(peft)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=s.device == "cuda")
    B, T = s.ppo_batch, s.ppo_seq
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, s.vocab, (B, T), generator=g).to(s.device)
    attn = torch.ones_like(ids)
    policy = torch.zeros_like(ids)
    policy[:, T // 4:] = 1  # the response: a quarter of prompt, then sampled tokens
    adv = torch.randn(B, 1, generator=g).expand(B, T).to(s.device)  # one advantage per episode
    stats: dict[str, float] = {}

    def step() -> None:
        with torch.no_grad():
            old = policy_forward(model, ids, attn, with_entropy=False).logprobs
            with ref.active() as base:
                ref_lp = policy_forward(base, ids, attn, with_entropy=False).logprobs
        new = policy_forward(model, ids, attn, with_entropy=True)
        loss, st = ppo_policy_loss(new.logprobs, old, adv, policy)
        kl = masked_mean(kl_estimate(new.logprobs, ref_lp, "k3"), policy.to(torch.bool))
        (loss + 0.01 * kl).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stats.update(loss=loss.item(), kl=kl.item(), clip_frac=st["clip_frac"])

    dt = _timed(s, step, max(1, s.steps // 2), 1)
    peak = _peak_gib(s)
    # the allocator's peak leaves out the CUDA context the plan adds to every GPU process
    planned = (mem["peak during update"] - (CUDA_CONTEXT if s.device == "cuda" else 0.0)) / 2**30
    return {"layers": layers, "of_layers": s.max_layers, "batch": B, "seq": T, "lora_rank": s.lora_rank,
            "params": sum(p.numel() for p in model.parameters()), "trainable": sum(p.numel() for p in params),
            "step_s": round(dt, 3), "tokens_per_s": round(B * T / dt, 1), "peak_mem_gib": peak,
            "estimate_gib": gib, "planned_peak_gib": round(planned, 3),
            "peak_over_plan": round(peak / planned, 3),
            "compared": "torch.cuda.max_memory_allocated against trainer/plan.py's peak during update less "
                        "its CUDA context" if s.device == "cuda" else
                        "the process's peak RSS (every step so far, Python and torch included) against "
                        "trainer/plan.py's peak during update: the wiring only, not a memory check",
            "last_step": stats,
            "step": "old + reference log-probs (no grad), policy forward/backward (clipped surrogate + "
                    "0.01 x k3 KL to the adapters-off base), AdamW on the adapters",
            "summary": f"{layers}/{s.max_layers} layers, {B * T / dt:.0f} tok/s, peak {peak} GiB "
                       f"(plan {planned:.3g}, ratio {peak / planned:.2f})"}


# -- (e) hf engine vs learner log-probs ----------------------------------------------------------


def _tokenizer(s: Setup) -> tuple[Any, str]:
    from agentgym.tokenizers import ByteTokenizer

    try:  # tiny:byte is agentgym's byte tokenizer
        from agentgym.trainer.model.gptoss import resolve_tokenizer

        return resolve_tokenizer(f"tiny:{s.tokenizer}"), s.tokenizer
    except Exception as e:  # openai_harmony missing: still a real engine/learner comparison
        return ByteTokenizer(), f"byte ({s.tokenizer} unavailable: {type(e).__name__}: {e})"


def step_engine_logprobs(s: Setup, out: Path) -> dict[str, Any]:
    from agentgym.trainer.doctor import run_doctor

    tok, tok_name = _tokenizer(s)
    config = s.config(s.engine_layers, tok.vocab_size)
    config.pad_token_id = int(getattr(tok, "pad_id", tok.vocab_size - 1))
    model = build_model(s, config).eval()
    model.generation_config.pad_token_id = config.pad_token_id  # type: ignore[union-attr]
    report = run_doctor(model, engine="hf", attn_implementation=s.attn, env_id="agentgym/MathCalc-v1",
                        episodes=s.episodes, max_new_tokens=s.new_tokens, device=s.device,
                        trainer_dtype="bfloat16", tokenizer=tok, env_kwargs={"max_turns": s.max_turns})
    st = report.stats
    return {"layers": s.engine_layers, "tokenizer": tok_name, "engine": "hf (eager attention, bf16)",
            "learner": f"policy_forward ({s.attn}, bf16)", "verdict": report.verdict, "reasons": report.reasons,
            "check": "pass" if st.get("k3", float("inf")) < 0.05 else "fail",
            "bounds": "k3 < 0.05, the bound tests/trainer/test_gpu_smoke.py sets for a bf16 engine against a bf16 learner",
            "mismatch_k3": st.get("k3"), "abs_dlogp_mean": st.get("abs_dlogp_mean"),
            "abs_dlogp_max": st.get("abs_dlogp_max"), "stats": st, "setup": report.setup,
            "summary": f"k3 {st.get('k3', float('nan')):.2e}, max |dlogp| {st.get('abs_dlogp_max', float('nan')):.3f}, "
                       f"{report.verdict}"}


# -- (a) the gpu-marked tests --------------------------------------------------------------------


def gpu_test_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text())


def step_gpu_tests(s: Setup, out: Path, timeout: float = 600) -> dict[str, Any]:
    files = gpu_test_files()
    xml = out / "gpu_tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *files]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    n["passed"] = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    return {"files": files, "returncode": proc.returncode, **n, "check": "pass" if proc.returncode == 0 else "fail",
            "summary": f"{n['passed']} passed, {n['skipped']} skipped, {n['failures'] + n['errors']} failed"}


STEPS: dict[str, Callable[..., dict[str, Any]]] = {
    "attention": step_attention, "mfu": step_mfu, "lora_ppo": step_lora_ppo,
    "engine_logprobs": step_engine_logprobs, "gpu_tests": step_gpu_tests,
}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"GPU check on {results['device']} (torch {results['torch']}){' - dry run' if results['dry'] else ''}",
             "", "| step | status | check | seconds | result |", "|---|---|---|---:|---|"]
    for name, r in results["steps"].items():
        text = r.get("summary") or r.get("error", "")
        lines.append(f"| {name} | {r['status']} | {r.get('check', '-')} | {r['seconds']:.1f} | {text} |")
    lines += ["", FLOPS_FORMULA, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="run every step on CPU at tiny shapes")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "out" / "gpu-check"))
    ap.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    ap.add_argument("--ppo-layers", type=int, default=0,
                    help="layers of the LoRA PPO step (default 0: the most the memory estimate fits)")
    ap.add_argument("--budget-s", type=float, default=450.0,
                    help="seconds for the whole check: the test step gets what the others left")
    args = ap.parse_args(argv)
    if not args.dry and not torch.cuda.is_available():
        print("bench/gpu_check.py: no CUDA GPU visible. Run it on a GPU machine, or add --dry to check "
              "the wiring on CPU at tiny shapes.", file=sys.stderr)
        return 2
    s = dataclasses.replace(DRY if args.dry else GPU, ppo_layers=args.ppo_layers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.dry:
        torch.set_num_threads(min(2, torch.get_num_threads()))
    import peft
    import transformers

    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if s.device == "cuda" else f"cpu ({platform.processor() or 'unknown'})",
        "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
        "dry": args.dry, "flops_formula": FLOPS_FORMULA, "steps": {},
    }
    start = time.perf_counter()
    for name in args.steps:
        t0 = time.perf_counter()
        kwargs = {"timeout": max(60.0, args.budget_s - (t0 - start))} if name == "gpu_tests" else {}
        try:
            r = {"status": "ok", **STEPS[name](s, out, **kwargs)}
        except Exception as e:  # one step's failure must not lose the others' results
            (out / f"{name}.traceback.txt").write_text(traceback.format_exc())
            r = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500]}
        r["seconds"] = round(time.perf_counter() - t0, 2)
        results["steps"][name] = r
        _reset_peak(s)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "results.md").write_text(markdown(results))
        print(f"{name}: {r['status']} in {r['seconds']:.1f} s - {r.get('summary') or r.get('error')}", flush=True)
    print(markdown(results))
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0 if all(r["status"] == "ok" for r in results["steps"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
