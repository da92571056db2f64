"""Asynchronous rollouts on the CPU quickstart's task: throughput, and correction under staleness.

    .venv/bin/python bench/async_rollouts.py warm --out runs/async            # one saved warm start
    .venv/bin/python bench/async_rollouts.py throughput --out runs/async --steps 6 --repeats 2
    .venv/bin/python bench/async_rollouts.py correction --out runs/async --seeds 1 2 3 --steps 10

Every run is the ``cpu-quickstart`` recipe (MathCalc-v1, tiny GPT-OSS, 4 tasks x 8 samples per
step) with an ``hf`` engine holding its own float32 copy of the weights
(``rollout.engine_weights=copy``, synced after every update), started from the same saved warm
start (``OUT/warm/warm_start``, made by ``warm`` with the same engine so its saved evaluation is
reused).

``throughput``: ``sync`` vs ``async`` with ``max_staleness`` 1 and 2, the same PPO seed and steps,
no evaluation; arms interleaved ``--repeats`` times. Per arm: episodes per second and the
learner-busy fraction (update time / step time, summed over steps), the ratio to ``sync`` of the
same repeat, and the load average around it.

``correction``: ``async`` with ``max_staleness=2`` and correction ``none`` / ``token_tis`` /
``token_tis+geo_mask``, one run per PPO seed (the warm start is shared: the seeds vary the tasks,
the sampling and the minibatch order, not the warm start); held-out success every
``--eval-every`` steps and at the end, paired on the same held-out problems, and what the
correction saw per staleness.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from agentgym.trainer.controls import arm_stats, seeds_table
from agentgym.trainer.metrics import read_metrics

RECIPE = "cpu-quickstart"
ENGINE = ["rollout.engine_weights=copy", "rollout.engine_dtype=float32", "rollout.sync_every=1"]
ARMS = {"sync": ["rollout.mode=sync"],
        "async-k1": ["rollout.mode=async", "rollout.max_staleness=1"],
        "async-k2": ["rollout.mode=async", "rollout.max_staleness=2"]}
MODES = ["none", "token_tis", "token_tis+geo_mask"]


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _train(run_dir: Path, overrides: list[str]) -> float:
    """One ``agentgym-train`` process (its output in RUN_DIR/stdout.txt); returns its wall time."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "agentgym.trainer.cli", "--config", RECIPE, f"log.run_dir={run_dir}",
           "log.progress=false", "controls=[]", "log.plots=false", *ENGINE, *overrides]
    t0 = time.perf_counter()
    with open(run_dir / "stdout.txt", "w") as out, open(run_dir / "stderr.txt", "w") as err:
        rc = subprocess.run(cmd, stdout=out, stderr=err).returncode
    if rc:
        raise SystemExit(f"{' '.join(cmd)}\nexit {rc}; see {run_dir}/stderr.txt")
    return time.perf_counter() - t0


def warm(args: argparse.Namespace) -> None:
    d = Path(args.out) / "warm"
    if (d / "warm_start" / "warm_start.json").exists():
        print(f"warm start already in {d}")
        return
    wall = _train(d, [f"seed={args.seed}", "ppo.steps=0", *args.overrides])
    print(f"warm start (seed {args.seed}) in {d}: {wall / 60:.1f} min")


def _warm_dir(args: argparse.Namespace) -> str:
    w = Path(args.out) / "warm" / "warm_start"
    if not (w / "warm_start.json").exists():
        raise SystemExit(f"no warm start in {w}: run `bench/async_rollouts.py warm --out {args.out}` first")
    return str(w)


def throughput(args: argparse.Namespace) -> None:
    w = _warm_dir(args)
    print(f"{RECIPE} from {w}; {args.steps} PPO steps per run, seed {args.seed}; {_cpu()}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'rep':>3} {'arm':<9} {'episodes/s':>10} {'x sync':>7} {'learner busy':>12} {'s/step':>7} "
          f"{'wait s/step':>11} {'stale':>5} {'partial':>7} {'load':>9}")
    for rep in range(args.repeats):
        base = None
        for arm, over in ARMS.items():
            d = Path(args.out) / "throughput" / f"rep{rep}" / arm
            if d.exists():
                import shutil

                shutil.rmtree(d)
            la0 = os.getloadavg()[0]
            _train(d, [f"seed={args.seed}", "sft.steps=0", f"sft.load={w}", f"ppo.steps={args.steps}",
                       "log.eval_every=0", "log.checkpoint_every=0", *over, *args.overrides])
            rows = read_metrics(d, "train")
            t_step = sum(r["t_step"] for r in rows)
            eps = sum(r["episodes_used"] for r in rows) / t_step
            busy = sum(r["t_update"] for r in rows) / t_step
            wait = sum(r["t_rollout"] for r in rows) / len(rows)
            base = base or eps
            stale = sum(r.get("staleness_mean", 0.0) for r in rows) / len(rows)
            partial = sum(r.get("episodes_partial", 0.0) for r in rows) / sum(r["episodes_used"] for r in rows)
            print(f"{rep:>3} {arm:<9} {eps:>10.2f} {eps / base:>7.2f} {busy:>12.2f} {t_step / len(rows):>7.2f} "
                  f"{wait:>11.2f} {stale:>5.2f} {partial:>7.2f} {la0:>4.1f}/{os.getloadavg()[0]:<4.1f}", flush=True)


def correction(args: argparse.Namespace) -> None:
    w = _warm_dir(args)
    res: dict[int, dict] = {}
    for seed in args.seeds:
        res[seed] = {"seed": seed, "status": "ok", "dirs": {}, "wall": {}}
        for mode in args.modes:
            d = Path(args.out) / "correction" / f"seed-{seed}" / mode.replace("+", "_")
            res[seed]["dirs"][mode] = str(d)
            if any(r.get("stage") == "ppo" and int(r["step"]) == args.steps for r in read_metrics(d, "eval")):
                print(f"seed {seed} {mode}: reused {d}", flush=True)
                continue
            if d.exists():
                import shutil

                shutil.rmtree(d)
            wall = _train(d, [f"seed={seed}", "sft.steps=0", f"sft.load={w}", f"ppo.steps={args.steps}",
                              "rollout.mode=async", f"rollout.max_staleness={args.k}", f"correction.mode={mode}",
                              f"log.eval_every={args.eval_every}", "log.checkpoint_every=0", *args.overrides])
            print(f"seed {seed} {mode}: {wall / 60:.1f} min, load {os.getloadavg()[0]:.1f}", flush=True)
    base = args.modes[0]
    print(f"\n{RECIPE}, async max_staleness={args.k}, {args.steps} PPO steps from {w}; {_cpu()}")
    print("\nheld-out success curves (training temperature; step: success)")
    for seed in args.seeds:
        for mode in args.modes:
            ev = [r for r in read_metrics(res[seed]["dirs"][mode], "eval") if "sampled_success" in r]
            print(f"  seed {seed} {mode:<20} " + "  ".join(f"{int(r['step'])}: {r['sampled_success']:.3f}" for r in ev))
    for prefix, what in (("sampled_", "final held-out success at the training temperature"),
                         ("", "final held-out success, greedy")):
        print(f"\n{what} (each mode - {base}, paired on the same problems)")
        print("\n".join(seeds_table(res, args.modes, base, prefix, minus_base=True)))
    print(f"\n{'seed':>4} {'mode':<20} {'k3':>9} {'|dlogp|':>8} {'ESS':>6} {'capped':>7} " + " ".join(
        f"{'k3 s' + str(j):>9}" for j in range(args.k + 1)) + "  alerts")
    for seed in args.seeds:
        for mode in args.modes:
            d = res[seed]["dirs"][mode]
            st, rows = arm_stats(d), read_metrics(d, "train")
            by = []
            for j in range(args.k + 1):
                xs = [r[f"mismatch_k3_s{j}"] for r in rows if f"mismatch_k3_s{j}" in r]
                by.append(sum(xs) / len(xs) if xs else float("nan"))
            print(f"{seed:>4} {mode:<20} {st['k3']:>9.2e} {st['abs_dlogp']:>8.4f} {st['ess']:>6.3f} "
                  f"{st['capped']:>7.3f} " + " ".join(f"{x:>9.2e}" for x in by) + f"  {st['alerts'] or 'none'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["warm", "throughput", "correction"])
    ap.add_argument("--out", default="runs/async")
    ap.add_argument("--seed", type=int, default=0, help="warm start / throughput seed")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--modes", nargs="+", default=MODES)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for every run")
    args = ap.parse_intermixed_args()
    {"warm": warm, "throughput": throughput, "correction": correction}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
