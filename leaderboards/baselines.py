"""Regenerate the baseline submissions and the board: one command, deterministic episodes.

    python -m agentgym.leaderboards.baselines                      # every suite, its default baselines
    python -m agentgym.leaderboards.baselines --suites calc --only oracle,do-nothing
    python -m agentgym.leaderboards.baselines --train              # train the quickstart first if needed
    # after a change to the quickstart recipe: train into a fresh run dir, then evaluate it
    python -m agentgym.leaderboards.baselines --suites calc --only quickstart --train --quickstart-run runs/qs-new

Submissions in the repository are verified in CI, so they must be regenerated whenever an
environment's behaviour (or the suite) changes; this writes them to
``leaderboards/submissions/SUITE/`` and rebuilds ``LEADERBOARD.md``. The scripted baselines are
exact; the quickstart model samples with per-episode seeds on one CPU thread, so the same weights
give the same episodes. The quickstart weights come from ``--quickstart-run`` (default
``runs/cpu-quickstart``, written by ``agentgym-train --config cpu-quickstart``); ``--train`` runs
that recipe first when the run has no checkpoint (an existing checkpoint is used as it is). Without
weights the quickstart baseline is refused before any file is touched.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentgym.leaderboards.board import DEFAULT_ROOT, build_board
from agentgym.leaderboards.evaluate import partial_path, run_suite
from agentgym.leaderboards.policies import make_policy
from agentgym.leaderboards.suite import load_suite

__all__ = ["BASELINES", "DEFAULTS", "main", "run_baseline"]

# name -> (policy, policy args, notes). {run} is the quickstart run dir.
BASELINES: dict[str, tuple[str, dict[str, Any], str]] = {
    "oracle": ("oracle", {}, "agentgym's scripted oracle (reads the task's reference): the ceiling"),
    "do-nothing": ("do-nothing", {}, "never calls a tool nor answers: the floor"),
    "quickstart": ("hf", {"model": "{run}", "threads": 1},
                   "the tiny GPT-OSS (~1M parameters, byte tokenizer) trained by the CPU quickstart on "
                   "MathCalc-v1 with the compact prompt (the calc suite's task; core uses the harmony prompt and "
                   "other tasks)"),
}

# The baselines each suite gets by default. The quickstart model on `core` is left out: its
# multi-turn prompts of 4-7k tokens are re-read at every turn by the hf engine (no KV cache
# across turns), about 1-8 minutes per CodeFix/WebAPI episode on 2 CPU cores: hours in all.
# `--suites core --only quickstart` runs it anyway.
DEFAULTS: dict[str, list[str]] = {"core": ["oracle", "do-nothing"], "calc": ["oracle", "do-nothing", "quickstart"]}


def run_baseline(name: str, *, suite_name: str = "core", root: Path = DEFAULT_ROOT, run: str = "runs/cpu-quickstart",
                 workers: int = 4, progress: bool = True) -> tuple[Path, float]:
    """Write ``root/submissions/SUITE/NAME.jsonl.gz``; returns its path and the seconds it took."""
    suite = load_suite(suite_name)
    policy_name, args, notes = BASELINES[name]
    args = {k: (v.format(run=run) if isinstance(v, str) else v) for k, v in args.items()}
    out = root / "submissions" / suite.name / f"{name}.jsonl.gz"
    t0 = time.perf_counter()
    policy = make_policy(policy_name, {"temperature": suite.temperature}, **args)  # fails before any file is touched
    if not partial_path(out).exists():
        out.unlink(missing_ok=True)  # a fresh run (an interrupted one is resumed instead)
    path = run_suite(suite, policy, out, name=name, policy_name=policy_name, policy_args=args, workers=workers,
                     progress=progress, notes=notes,
                     command=["python", "-m", "agentgym.leaderboards.baselines", "--only", name])
    assert path is not None
    return path, time.perf_counter() - t0


def _has_checkpoint(run: str) -> bool:
    from agentgym.trainer.model.files import latest_checkpoint

    return Path(run).is_dir() and latest_checkpoint(run) is not None


def _train(run: str) -> None:
    if _has_checkpoint(run):
        return
    cmd = [sys.executable, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", f"log.run_dir={run}"]
    print("training the quickstart:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated, from: " + ", ".join(BASELINES) + " (default: per suite, "
                    + "; ".join(f"{k}: {','.join(v)}" for k, v in DEFAULTS.items()) + ")")
    ap.add_argument("--suites", default="core,calc", help="comma-separated suite names (default: %(default)s)")
    ap.add_argument("--quickstart-run", default="runs/cpu-quickstart")
    ap.add_argument("--train", action="store_true", help="train the quickstart first if the run has no checkpoint")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="do not rebuild LEADERBOARD.md afterwards")
    args = ap.parse_args(argv)
    suites = [x.strip() for x in args.suites.split(",") if x.strip()]
    plan = {s: [n.strip() for n in args.only.split(",") if n.strip()] if args.only else DEFAULTS.get(s, ["oracle"])
            for s in suites}
    unknown = {n for names in plan.values() for n in names} - set(BASELINES)
    if unknown:
        ap.error(f"unknown baselines {sorted(unknown)}; known: {list(BASELINES)}")
    if any("quickstart" in names for names in plan.values()):
        if args.train:
            _train(args.quickstart_run)
        elif not _has_checkpoint(args.quickstart_run):
            ap.error(f"the quickstart baseline needs a trained model in {args.quickstart_run} and it has no "
                     "checkpoint: add --train (runs the cpu-quickstart recipe there, ~10 min on 2 cores), point "
                     "--quickstart-run at a run dir, or leave it out with --only oracle,do-nothing")
    for suite, names in plan.items():
        for name in names:
            path, seconds = run_baseline(name, suite_name=suite, run=args.quickstart_run, workers=args.workers,
                                         progress=not args.no_progress)
            print(f"{suite}/{name}: {path} in {seconds:.1f} s ({path.stat().st_size / 1024:.0f} KiB)", flush=True)
    if not args.no_build:
        result = build_board(DEFAULT_ROOT, workers=args.workers, progress=not args.no_progress)
        print(result.format())
        return 0 if result.ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
