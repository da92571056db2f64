"""The main job's recipe with several seeds: PPO's own gain over the warm start, per seed.

    .venv/bin/python bench/quickstart_seeds.py                  # seeds 0 1 2, one after another
    .venv/bin/python bench/quickstart_seeds.py --seeds 3 4 --jobs 2 --out runs/qs-seeds

Each seed is one ``agentgym-train --config cpu-quickstart seed=S`` run (a subprocess, so its
wall and CPU time are its own). From its ``metrics.jsonl`` this prints, greedy and at the
training temperature, the success of the untrained policy, the warm start and the end of
PPO on the recipe's fixed evaluation tasks, PPO's own gain (end - warm start) with its
standard error, and whether the issue's bar holds: gain >= +0.15 and >= 4 standard errors.
Then the stability checks: no greedy evaluation after PPO started below the warm start's,
the largest KL to the reference, entropy and gradient norm against the recipe's health
bounds, and the health monitor's alerts. Exit status 1 if any seed misses the bar.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentgym.trainer.config import load_config
from agentgym.trainer.evaluation import gain
from agentgym.trainer.health import health_summary
from agentgym.trainer.metrics import read_metrics

BAR_GAIN, BAR_Z = 0.15, 4.0


def run_seed(seed: int, out: Path, extra: list[str]) -> dict[str, Any]:
    run_dir = out / f"seed-{seed}"
    cmd = [sys.executable, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", f"seed={seed}",
           f"log.run_dir={run_dir}", "log.progress=false", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (run_dir / "stdout.txt").write_text(proc.stdout)
    return {"seed": seed, "run_dir": str(run_dir), "wall_s": wall, "report": proc.stdout.strip().splitlines()[-4:]}


def analyse(run_dir: str) -> dict[str, Any]:
    cfg = load_config(Path(run_dir) / "config.yaml")
    rows = read_metrics(run_dir)
    evals = [r for r in rows if r["phase"] == "eval"]
    stage = {r["stage"]: r for r in evals}
    warm, final = stage["warm_start"], [r for r in evals if r["stage"] == "ppo"][-1]
    train = [r for r in rows if r["phase"] == "train"]
    sft = [r for r in rows if r["phase"] == "sft"]
    res: dict[str, Any] = {"untrained": stage.get("init", {}).get("success"), "warm": warm["success"],
                           "final": final["success"], "episodes": final["episodes"],
                           "sampled_warm": warm.get("sampled_success"),
                           "sampled_final": final.get("sampled_success"),
                           "sampled_untrained": stage.get("init", {}).get("sampled_success")}
    for prefix in ("", "sampled_"):
        g = gain(warm, final, prefix)
        res[prefix + "gain"] = g
        res[prefix + "meets_bar"] = bool(g and g["gain"] >= BAR_GAIN and g["z"] >= BAR_Z)
    mid = [r["success"] for r in evals if r["stage"] == "ppo"]
    res["greedy_min_during_ppo"] = min(mid) if mid else None
    res["no_greedy_regression"] = all(x >= warm["success"] for x in mid)
    h = cfg.health
    res["kl_max"] = max((r.get("kl_ref", 0.0) for r in train), default=0.0)
    res["entropy_max"] = max((r.get("entropy", 0.0) for r in train), default=0.0)
    res["grad_norm_max"] = max((r.get("grad_norm", 0.0) for r in train), default=0.0)
    res["bounds"] = {"kl_ref": h.max_kl_ref, "min_entropy": h.min_entropy,
                     "entropy_ratio": h.max_entropy_ratio, "grad_norm_ratio": h.max_grad_norm_ratio}
    res["alerts"] = health_summary(train)
    res["sft_s"] = sum(r.get("t_step", 0.0) for r in sft)
    res["ppo_s"] = sum(r.get("t_step", 0.0) for r in train)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each uses the recipe's threads)")
    ap.add_argument("--out", default="runs/quickstart-seeds")
    ap.add_argument("--analyse-only", action="store_true", help="re-read existing run dirs under --out")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("overrides", nargs="*", help="extra KEY=VALUE overrides for every run")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.analyse_only:
        runs = [{"seed": s, "run_dir": str(out / f"seed-{s}"), "wall_s": None} for s in args.seeds]
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(lambda s: run_seed(s, out, args.overrides), args.seeds))
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = [{**r, **analyse(r["run_dir"])} for r in runs]

    def cell(r: dict[str, Any], prefix: str) -> str:
        g = r[prefix + "gain"]
        a, b = r[prefix + "warm"], r[prefix + "final"]
        if g is None or a is None:
            return "-"
        return f"{a:.3f} -> {b:.3f}  {g['gain']:+.3f} ± {g['se']:.3f} ({g['z']:.1f} SE)"

    n = results[0]["episodes"]
    print(f"PPO's own gain over the warm start, {n} fixed eval tasks (bar: >= +{BAR_GAIN} and >= {BAR_Z:g} SE)")
    print(f"{'seed':>4}  {'greedy: warm -> PPO, gain':<40} {'sampled: warm -> PPO, gain':<40} bar  wall")
    for r in results:
        ok = r["meets_bar"] and r["sampled_meets_bar"]
        wall = f"{r['wall_s'] / 60:.1f} min" if r.get("wall_s") else "-"
        print(f"{r['seed']:>4}  {cell(r, ''):<40} {cell(r, 'sampled_'):<40} {'yes' if ok else 'NO ':<4} {wall}")
    print(f"{'seed':>4}  untrained (greedy/sampled)  min greedy during PPO  KL max  entropy max  "
          f"grad norm max  health alerts")
    for r in results:
        su = r["sampled_untrained"]
        print(f"{r['seed']:>4}  {r['untrained'] or 0:.3f} / {su if su is not None else float('nan'):.3f}"
              f"{'':13}{r['greedy_min_during_ppo']:.3f} ({'>= warm' if r['no_greedy_regression'] else 'BELOW warm'})"
              f"{'':6}{r['kl_max']:.3f}   {r['entropy_max']:.3f}        {r['grad_norm_max']:.3f}"
              f"          {r['alerts'] or 'none'}")
    print(f"bounds (health.*): {results[0]['bounds']}")
    if not args.analyse_only:
        print(f"children CPU time: user {usage.ru_utime / 60:.1f} min, sys {usage.ru_stime / 60:.1f} min")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["meets_bar"] and r["sampled_meets_bar"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
