"""PPO against its controls on any seeds: one warm start per seed, every arm from it.

    .venv/bin/python bench/controls.py --seeds 17 23 31 --jobs 4
    .venv/bin/python bench/controls.py --seeds 5 --recipe cpu-quickstart --out runs/ctl ppo.steps=30
    .venv/bin/python bench/controls.py --seeds 17 23 --out runs/ctl --analyse-only --kl
    .venv/bin/python bench/controls.py --seeds 3 5 --recipe cpu-lookup --grid depth=1,2,3,4 fail_rate=0,0.3
    .venv/bin/python bench/controls.py --seeds 5 --arms ppo rft \
        --warm-overrides env.kwargs.families=[arithmetic] -- env.kwargs.families=[order_of_operations]

Per seed, the recipe's warm start runs once (``agentgym-train --config RECIPE seed=S ppo.steps=0``
in ``OUT/seed-S/warm``: SFT, its held-out evaluation, the saved ``warm_start/``); then every arm
(``--arms``, default ``ppo placebo rft raft sft``) runs as its own process from that warm start
(``sft.load``), with the same seeds, so the arms see the same training tasks, sampling seeds
and held-out problems. ``--jobs`` processes run at once (each takes the recipe's ``threads``).
Finished run dirs are reused and killed runs continue from their last checkpoint
(``agentgym-train --resume``), so an interrupted bench continues where it stopped; pass
``log.checkpoint_every=5`` to checkpoint the arms' RL steps more often than the recipe does.
The runs go seed by seed (a free job takes the first run of the earliest seed whose warm start
is done), so the first seeds finish first.

Prints, per seed, held-out success at the training temperature (primary) and greedy
(secondary) of the warm start and of every arm, then PPO minus each other arm on the same
problems: the paired difference, its standard error and z. A seed whose warm start did not
learn the tool loop (exit status 3) is listed as failed. Then, across seeds (a seed re-draws
all of a run's data: weights, demonstrations, tasks, sampling), every arm minus the warm start
and PPO minus every other arm: each seed's value, the mean, its between-seed SE, t and 95%
interval. The verdict uses those intervals: an arm is ahead of another only when the interval
of their difference is above 0; exit status 1 if any seed failed or PPO - placebo's interval is
not above 0. The per-seed bar (PPO - placebo >= +0.10 and >= 4 paired SE, PPO - RFT not below
-2 SE, no health alert) stays as a per-seed check: the paired SE covers evaluation noise only.
With ``--grid``, every finished run (warm starts included) is also evaluated, as soon as it
finishes and in its own process, on each cell of a grid of eval options (``trainer/grid.py``: the same held-out problems and random numbers for
every run), and each cell gets the same per-seed and between-seed differences.
Also the wall time of every process and the children's CPU time. With ``--kl``,
how far each arm moved: KL(arm || warm start) per policy token on the arm's own held-out
episodes (``controls.kl_to_warm_start``), next to its gain over the warm start.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym.trainer.config import ARMS, load_config
from agentgym.trainer.controls import (
    arm_overrides,
    arm_stats,
    between_seed_lines,
    between_seeds,
    final_eval,
    kl_to_warm_start,
    run_seeds,
    seed_differences,
    seeds_table,
    trained_eval,
    warm_start_done,
)
from agentgym.trainer.grid import cell_name, grid_eval, grid_lines, parse_grid, stored_grid
from agentgym.trainer.stats import gain


def verdict(r: dict[str, Any], base: str, bar: argparse.Namespace) -> tuple[bool, str]:
    """Does seed ``r`` meet the bar? -> (ok, why)."""
    if r["status"] != "ok":
        return False, r["status"]
    if r.get("arm_errors"):
        return False, f"arm errors: {r['arm_errors']}"
    finals = {a: trained_eval(d) for a, d in r["dirs"].items() if a != "warm"}
    if finals.get(base) is None:
        return False, f"{base} did not finish"
    unfinished = sorted(a for a, f in finals.items() if f is None)
    why = [f"unfinished: {', '.join(unfinished)}"] if unfinished else []
    ok = not unfinished
    if base != "placebo" and finals.get("placebo"):
        g = gain(finals["placebo"], finals[base], "sampled_")  # type: ignore[arg-type]
        hit = bool(g and g["gain"] >= bar.bar_gain and g["z"] >= bar.bar_z)
        ok &= hit
        why.append(f"placebo gap {'ok' if hit else 'MISSED'}")
    if base != "rft" and finals.get("rft"):
        g = gain(finals["rft"], finals[base], "sampled_")  # type: ignore[arg-type]
        hit = bool(g and g["z"] >= -bar.bar_rft_z)
        ok &= hit
        why.append(f"vs RFT {'ok' if hit else 'BELOW'}")
    alerts = arm_stats(r["dirs"][base])["alerts"]
    if alerts:
        ok = False
        why.append(f"health alerts {alerts}")
    return ok, ", ".join(why) or "no control arm"


def kl_table(res: dict[int, dict[str, Any]], arms: list[str], samples: int, problems: int = 256) -> str:
    """Per seed and arm: KL(arm || warm start) per policy token on the arm's own held-out
    episodes at the training temperature, ± its SE, and the arm's gain over the warm start there."""
    lines = [f"\nKL to the warm start per policy token (k3 ± SE; {problems} held-out problems x {samples} samples "
             "at the training temperature, the arm's own episodes); in brackets the arm's gain over the warm "
             "start at that temperature"]
    lines.append(f"{'seed':>5} " + " ".join(f"{a:>24}" for a in arms))
    for s, r in res.items():
        if r["status"] != "ok":
            continue
        cells, ws = [], final_eval(r["dirs"]["warm"])
        for a in arms:
            fin = trained_eval(r["dirs"][a])
            if fin is None or ws is None:
                cells.append(f"{'-':>24}")
                continue
            k = kl_to_warm_start(r["dirs"][a], problems=problems, samples=samples)
            g = fin.get("sampled_success", math.nan) - ws.get("sampled_success", math.nan)
            cells.append(f"{k['kl']:.3f}±{k['kl_se']:.3f} ({g:+.3f})".rjust(24))
        lines.append(f"{s:>5} " + " ".join(cells))
    return "\n".join(lines)


def _grid_start(args: argparse.Namespace) -> int:
    if args.grid_seed_start is not None:
        return args.grid_seed_start
    return load_config(args.recipe, args.overrides).log.eval_seed_start


def grid_after(args: argparse.Namespace) -> Callable[[int, str, Path], None]:
    """Evaluate each run on the grid as soon as it finishes, in its own process beside the other
    jobs (stored in its grid.json; :func:`grid_table` reads it back)."""
    cells, start = parse_grid(args.grid), _grid_start(args)

    def after(seed: int, name: str, run_dir: Path) -> None:
        if stored_grid(run_dir, cells, problems=args.grid_problems, samples=args.grid_samples,
                       seed_start=start) is not None:
            return
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "agentgym.trainer.grid", str(run_dir), "--grid", *args.grid,
               "--problems", str(args.grid_problems), "--samples", str(args.grid_samples), "--seed-start", str(start)]
        with open(run_dir / "grid.txt", "a") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        print(f"seed {seed}: {name} grid {'done' if not rc else f'FAILED (see {run_dir}/grid.txt)'} "
              f"in {(time.perf_counter() - t0) / 60:.1f} min", flush=True)

    return after


def grid_table(res: dict[int, dict[str, Any]], arms: list[str], base: str,
               args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """Every finished run of every ok seed on each cell of ``--grid``; prints, per cell, each arm
    minus the warm start and the base arm minus each other arm, per seed and between seeds."""
    cells, start = parse_grid(args.grid), _grid_start(args)
    records: dict[int, dict[str, Any]] = {}
    for s, r in res.items():
        if r["status"] != "ok":
            continue
        for a in ["warm", *arms]:
            d = r["dirs"].get(a)
            if d and (a == "warm" or trained_eval(d) is not None):
                records.setdefault(s, {})[a] = grid_eval(d, cells, problems=args.grid_problems,
                                                         samples=args.grid_samples, seed_start=start)
    names = [cell_name(c) for c in cells]
    size = f"{args.grid_problems} held-out problems per cell from seed {start}"
    for prefix, what, at_k in (("sampled_", f"at the training temperature, {args.grid_samples} samples each", False),
                               ("", "greedy", False),
                               ("sampled_", f"pass@{args.grid_samples} at the training temperature", True)):
        print(f"\nby cell ({size}), held-out success {what}: per seed, then between seeds")
        print("\n".join(grid_lines(records, names, arms, base, prefix, pass_at_k=at_k)))
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--recipe", default="cpu-quickstart")
    ap.add_argument("--arms", nargs="+", default=["ppo", "placebo", "rft", "raft", "sft"], choices=sorted(ARMS),
                    help="put KEY=VALUE overrides before --arms, or after `--`")
    ap.add_argument("--jobs", type=int, default=1, help="processes at once")
    ap.add_argument("--out", default="runs/controls")
    ap.add_argument("--analyse-only", action="store_true", help="read existing run dirs under --out")
    ap.add_argument("--bar-gain", type=float, default=0.10)
    ap.add_argument("--bar-z", type=float, default=4.0)
    ap.add_argument("--bar-rft-z", type=float, default=2.0)
    ap.add_argument("--kl", action="store_true",
                    help="also measure each arm's KL to its warm start on its own held-out episodes (1-2 min an arm)")
    ap.add_argument("--kl-samples", type=int, default=4, help="samples per held-out problem for --kl")
    ap.add_argument("--json", help="also write the per-seed results here")
    ap.add_argument("--grid", nargs="+", metavar="KEY=V1,V2", default=[],
                    help="also evaluate every finished run (warm starts included) on each cell of this grid of "
                         "eval options, e.g. --grid depth=1,2,3,4 fail_rate=0,0.3 (trainer/grid.py)")
    ap.add_argument("--grid-problems", type=int, default=64, help="held-out problems per grid cell")
    ap.add_argument("--grid-samples", type=int, default=4, help="samples per problem at the training temperature")
    ap.add_argument("--grid-seed-start", type=int, default=None,
                    help="first problem seed of the grid (default: the recipe's log.eval_seed_start)")
    ap.add_argument("--warm-overrides", nargs="+", default=[], metavar="KEY=VALUE",
                    help="overrides for the warm starts only, after the common ones (e.g. the demos' "
                         "env.kwargs.families=[arithmetic] while the arms train on another family)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for every run (warm starts included)")
    args = ap.parse_args()
    base = args.arms[0]
    arms = {a: arm_overrides(a) for a in args.arms}
    t0 = time.perf_counter()
    if args.analyse_only:
        res = {s: {"seed": s, "status": "ok", "wall": {},
                   "dirs": {"warm": str(Path(args.out) / f"seed-{s}" / "warm"),
                            **{a: str(Path(args.out) / f"seed-{s}" / a) for a in arms}}} for s in args.seeds}
        for r in res.values():  # a warm start stopped part way has no warm_start/ yet: nothing to compare
            if not warm_start_done(r["dirs"]["warm"]):
                r["status"] = "warm start unfinished"
    else:
        res = run_seeds(args.recipe, args.seeds, arms, args.out, jobs=args.jobs, extra=args.overrides,
                        warm_extra=args.warm_overrides, after=grid_after(args) if args.grid else None)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\n{args.recipe}, seeds {args.seeds}, arms {args.arms}; {base} - each arm is paired on the "
          "same held-out problems: difference ± SE (z)")
    for prefix, what, at_k in (("sampled_", "held-out success at the training temperature (primary)", False),
                               ("", "held-out success, greedy (secondary)", False),
                               ("sampled_", "held-out pass@k at the training temperature (k = samples per problem)", True)):
        print(f"\n{what}")
        print("\n".join(seeds_table(res, list(arms), base, prefix, pass_at_k=at_k)))
    for prefix, what, at_k in (("sampled_", "at the training temperature (primary)", False),
                               ("", "greedy (secondary)", False),
                               ("sampled_", "pass@k at the training temperature", True)):
        print(f"\nbetween seeds, held-out success {what}: each seed's paired difference, then across seeds")
        print("\n".join(between_seed_lines(res, list(arms), base, prefix, pass_at_k=at_k)))
    all_ok = all(r["status"] == "ok" for r in res.values())
    diffs = seed_differences(res, list(arms), base, "sampled_")
    print(f"\nverdict (95% interval between seeds, at the training temperature; {len(res)} seeds):")
    for a in arms:
        if a == base:
            continue
        per = diffs.get(f"{base} - {a}", {})
        st = between_seeds(list(per.values()))
        if len(per) < 2:
            say = f"not decided ({len(per)} seed(s) with both arms)"
        elif st["lo"] > 0:
            say = f"{base} ahead of {a}"
        elif st["hi"] < 0:
            say = f"{base} behind {a}"
        else:
            say = f"{base} and {a} not told apart"
        print(f"  {base} - {a}: {st['mean']:+.3f} [{st['lo']:+.3f}, {st['hi']:+.3f}]: {say}")
        if a == "placebo":
            all_ok &= len(per) >= 2 and st["lo"] > 0
    controls = [a for a in arms if a != base]
    bar = [f"{base} - placebo >= +{args.bar_gain:.2f} and >= {args.bar_z:g} paired SE at T"] if "placebo" in controls else []
    bar += [f"{base} - RFT >= -{args.bar_rft_z:g} SE"] if "rft" in controls else []
    print(f"\nper seed check: bar ({'; '.join([*bar, 'no alerts'])}), health, minutes per process")
    for s, r in res.items():
        ok, why = verdict(r, base, args)
        walls = ", ".join(f"{k} {v / 60:.1f}" for k, v in r.get("wall", {}).items())
        alerts = {a: arm_stats(d)["alerts"] for a, d in r["dirs"].items() if a != "warm" and Path(d).exists()}
        print(f"{s:>5}  {'yes' if ok else 'NO '}  {why}; alerts {({a: v for a, v in alerts.items() if v}) or 'none'}"
              + (f"; min {walls}" if walls else ""))
    if args.kl:
        print(kl_table(res, list(arms), args.kl_samples))
    if not args.analyse_only:
        print(f"\nwall {wall / 60:.1f} min for all; children CPU user {usage.ru_utime / 60:.1f} min, "
              f"sys {usage.ru_stime / 60:.1f} min; load average now {os.getloadavg()[0]:.1f}")
    if args.grid:
        grid = grid_table(res, list(arms), base, args)
        for r in res.values():
            r["grid"] = grid.get(r["seed"], {})
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
