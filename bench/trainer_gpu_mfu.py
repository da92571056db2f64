"""Learner throughput and MFU on a GPT-OSS-shaped model with the sink-aware attention (GPU).

Real GPT-OSS widths (hidden 2880, 64 query / 8 KV heads of dim 64, 32 experts top-4, vocab
201,088, alternating sliding-window 128 / full attention) with fewer layers, in bf16. One
step = ``policy_forward`` (the trainer's log-prob pass: the fused output head by default,
``--head chunked`` for the old one; experts as ``agentgym_grouped_mm``) + backward of a
token-level loss + a fused AdamW step, exactly what a PPO minibatch costs. Reports tokens/s
and model FLOPs utilisation (achieved training FLOPs / peak dense bf16 FLOPs of the GPU).
Before timing it checks ``agentgym_flex`` against eager attention on the same weights in
float32 (a bf16 comparison measures bf16 rounding: 0.88 max |dlogp|, against 1.1e-5 in fp32).

    python bench/trainer_gpu_mfu.py --layers 2 --batch 4 --seq 2048
    python bench/trainer_gpu_mfu.py --head chunked --head-chunk-mb 64     # the H100 profile's setting

Without CUDA it prints why it cannot run and exits 0.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "B200": 2250.0}


def flop_terms(cfg, seq: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """-> (active matmul parameters per token, attention FLOPs per token for training).

    Matmul parameters: q, k, v, o projections, the router, the k chosen experts' gate/up and down
    projections, and the output head (embeddings are lookups). Attention: scores and values
    cost 4*ctx*H*Dh forward per token and layer, x3 with the backward; ctx is the mean context
    of a causal row, (seq+1)/2, capped at the sliding window on sliding layers."""
    h, hd, nq, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    inter, k = cfg.intermediate_size, cfg.num_experts_per_tok
    attn_proj = h * nq * hd * 2 + h * nkv * hd * 2  # q, o + k, v
    experts = k * (h * 2 * inter + inter * h)
    router = h * cfg.num_local_experts
    per_layer = attn_proj + experts + router
    matmul = float(cfg.num_hidden_layers * per_layer + h * cfg.vocab_size)
    attn = 0.0
    for kind in cfg.layer_types:
        ctx = (seq + 1) / 2 if kind == "full_attention" else min(cfg.sliding_window, (seq + 1) / 2)
        attn += 3 * 4 * ctx * nq * hd
    return matmul, attn


def training_flops_per_token(cfg, seq: int) -> float:  # type: ignore[no-untyped-def]
    """6 x active matmul parameters + attention scores/values (fwd 4*ctx*H*Dh, x3 for training)."""
    matmul, attn = flop_terms(cfg, seq)
    return 6.0 * matmul + attn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--attn", default="agentgym_flex", help="agentgym_flex | eager")
    ap.add_argument("--head", default="fused", help="output head: fused | chunked")
    ap.add_argument("--head-chunk-mb", type=float, default=1024, help="float32 logits per head chunk (MiB)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the GPU's dense bf16 peak")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench/trainer_gpu_mfu.py: skipped, no CUDA GPU visible (this benchmark measures the "
              "GPU learner; run it on a GPU machine).")
        return 0

    from transformers import GptOssConfig, GptOssForCausalLM

    from agentgym.trainer.model.attention import set_attention
    from agentgym.trainer.model.gptoss import register_experts
    from agentgym.trainer.model.logprobs import policy_forward

    layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(args.layers)]
    cfg = GptOssConfig(num_hidden_layers=args.layers, layer_types=layer_types, num_local_experts=32,
                       num_experts_per_tok=4)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GptOssForCausalLM(cfg)  # float32 for the check, then bf16
    model.config._experts_implementation = register_experts()
    model.train()
    params = sum(p.numel() for p in model.parameters())

    # correctness on the real shapes, in float32: sink-aware flex vs eager, same weights
    ids = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda")
    with torch.no_grad():
        set_attention(model, "eager")
        ref = policy_forward(model, ids).logprobs
        set_attention(model, "agentgym_flex")
        got = policy_forward(model, ids).logprobs
    check = float((ref - got).abs().max())
    set_attention(model, args.attn)
    model.to(torch.bfloat16)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")
    mask = torch.ones_like(ids)
    chunk = int(args.head_chunk_mb * (1 << 20))

    def step() -> None:
        out = policy_forward(model, ids, mask, with_entropy=True, head=args.head, head_chunk_bytes=chunk)
        loss = -(out.logprobs.sum() + 0.01 * out.entropy.sum()) / ids.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    tokens = args.batch * args.seq
    name = torch.cuda.get_device_name()
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    achieved = training_flops_per_token(cfg, args.seq) * tokens / dt / 1e12
    result = {
        "device": name, "attn": args.attn, "layers": args.layers, "params": params, "batch": args.batch,
        "seq": args.seq, "step_s": round(dt, 4), "tokens_per_s": round(tokens / dt, 1),
        "achieved_tflops": round(achieved, 1), "mfu": round(achieved / peak, 4) if peak else None,
        "peak_tflops": peak, "max_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "head": args.head, "head_chunk_mb": args.head_chunk_mb,
        "flex_vs_eager_max_abs_dlogp_fp32": check, "torch": torch.__version__,
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k:>34}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
