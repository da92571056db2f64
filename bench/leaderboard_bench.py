"""Suite run time vs verify time for each baseline submission, measured in the same process.

For every baseline: ``agentgym-eval`` runs the suite into a temporary folder (timed), then
``agentgym leaderboard verify`` replays that submission (timed), with the same number of workers.
Prints seconds, the verify / run ratio and the load average around each measurement (the
machine may be shared: compare ratios, not absolute seconds, across machines).

    python bench/leaderboard_bench.py                       # every suite, its default baselines
    python bench/leaderboard_bench.py --suites core --baselines oracle,do-nothing --workers 4
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from agentgym.leaderboards.baselines import BASELINES, DEFAULTS, run_baseline
from agentgym.leaderboards.verify import verify_submission


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baselines", help=f"comma-separated, from {list(BASELINES)} (default: per suite {DEFAULTS})")
    ap.add_argument("--suites", default="core,calc")
    ap.add_argument("--quickstart-run", default="runs/cpu-quickstart")
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentgym-lb-bench-") as tmp:
        for suite in [x.strip() for x in args.suites.split(",") if x.strip()]:
            names = args.baselines.split(",") if args.baselines else DEFAULTS.get(suite, ["oracle"])
            for name in [n.strip() for n in names if n.strip()]:
                rows.append(_measure(suite, name, Path(tmp), args.quickstart_run, args.workers))
    print(f"\n{args.workers} workers, {os.cpu_count()} CPUs")
    print(f"{'suite/baseline':<20}{'episodes':>9}{'run s':>9}{'verify s':>10}{'verify/run':>12}{'score':>7}"
          f"{'KiB':>7}   load avg (start / after run / after verify)")
    for name, n, run_s, ver_s, score, l0, l1, l2, kib in rows:
        print(f"{name:<20}{n:>9}{run_s:>9.1f}{ver_s:>10.1f}{ver_s / run_s:>12.3f}{score:>7.3f}{kib:>7.0f}"
              f"   {l0:.1f} / {l1:.1f} / {l2:.1f}")


def _measure(suite: str, name: str, root: Path, run: str, workers: int) -> tuple:  # type: ignore[type-arg]
    load0 = os.getloadavg()[0]
    path, run_s = run_baseline(name, suite_name=suite, root=root, run=run, workers=workers, progress=False)
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    report = verify_submission(path, workers=workers)
    verify_s = time.perf_counter() - t0
    load2 = os.getloadavg()[0]
    if not report.ok:
        raise SystemExit(f"{suite}/{name}: the fresh submission does not verify: {report.problems[:3]}")
    print(f"{suite}/{name}: run {run_s:.1f} s, verify {verify_s:.1f} s", flush=True)
    return (f"{suite}/{name}", len(report.episodes), run_s, verify_s, report.overall["mean"], load0, load1, load2,
            path.stat().st_size / 1024)


if __name__ == "__main__":
    main()
