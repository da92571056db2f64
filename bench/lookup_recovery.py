"""Does a policy recover from Lookup-v1's faults? Episodes of finished runs, counted by what they
did after a fault.

    .venv/bin/python bench/lookup_recovery.py runs/lookup/seed-5101/warm runs/lookup/seed-5101/ppo
    .venv/bin/python bench/lookup_recovery.py RUN_DIR --depth 2 --fail-rate 0.5 --problems 96

Each run's final weights (a finished arm's last checkpoint, or a warm start's ``warm_start/``)
play ``--problems`` distinct problems of ``--split`` from problem seed ``--seed-start``, one
episode each at the run's rollout temperature, with the same sampling seed for every run. Printed
per run (``environments/lookup/recovery.py``): the episodes that met a fault and how many of
them were solved, the same for the episodes that met none, and the faults met and how many the
next turn called again with the same code. A policy that solves no episode that met a fault
gives RL nothing about recovery to reinforce: its successes are its samples that met no fault.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentgym.environments.lookup.recovery import fault_record, fault_summary
from agentgym.errors import AgentGymError
from agentgym.trainer.evaluation import collect_fixed
from agentgym.trainer.grid import final_policy
from agentgym.trainer.rollout.heldout import distinct_problems

SAMPLE_SEED = 77


def probe(run_dir: str, *, problems: int, depth: int, fail_rate: float, split: str,
          seed_start: int) -> dict[str, int]:
    with final_policy(run_dir) as t:
        if t.cfg.env.id != "agentgym/Lookup-v1":
            raise AgentGymError(f"{run_dir}: a run on {t.cfg.env.id}; this bench reads Lookup-v1 episodes")
        opts = {"depth": depth, "fail_rate": fail_rate, "split": split}
        env = t.rollouts.make_env(split)
        try:
            seeds = [s for s, _ in distinct_problems(env, problems, options=opts, start=seed_start)]
        finally:
            env.close()
        with t.learner.compute():
            eps = collect_fixed(t.rollouts.eval_collector, temperature=t.cfg.rollout.temperature,
                                sample_seed=SAMPLE_SEED, options=opts, seeds=seeds)
        decode = t.learner.tokenizer.decode
        return fault_summary([fault_record(e.traj, decode) for e in eps if not e.lost])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="finished run dirs (an arm, or a warm start)")
    ap.add_argument("--problems", type=int, default=48)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--fail-rate", type=float, default=0.3)
    ap.add_argument("--split", default="train", choices=["train", "eval"])
    ap.add_argument("--seed-start", type=int, default=9_000_000, help="first problem seed")
    ap.add_argument("--json", help="also write the counts per run here")
    args = ap.parse_args(argv)
    print(f"{args.problems} problems of the {args.split} split from seed {args.seed_start}, depth {args.depth}, "
          f"fail rate {args.fail_rate}, one episode each at the run's rollout temperature")
    print(f"{'run':<48} {'met a fault: solved':>20} {'no fault: solved':>17} {'faults: called again':>21}")
    out = {}
    for run in args.runs:
        try:
            c = probe(run, problems=args.problems, depth=args.depth, fail_rate=args.fail_rate, split=args.split,
                      seed_start=args.seed_start)
        except AgentGymError as e:
            print(f"lookup_recovery: {e}", file=sys.stderr)
            return 2
        out[run] = c
        print(f"{run[-48:]:<48} {c['met_fault_solved']:>11} of {c['met_fault']:<5} {c['no_fault_solved']:>8} of "
              f"{c['no_fault']:<5} {c['faults_retried']:>12} of {c['faults']:<5}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
