"""Reward hacks, measured: what a policy that does not do the task earns.

    .venv/bin/python bench/reward_hacks.py            # ~3 min on 2 busy cores (needs bubblewrap)

1. WebAPI-v1: "Done." at once (no tool call) on every train and test task, sparse and shaped.
   Before issue 10 it earned 1.0 on 79 of 339 train and 16 of 93 test tasks (the forbidden ones).
2. CodeFix-v1: the partial credit a degenerate program would get from the hidden-test pass rate
   (``pass_rate_delta``): the body of the buggy function replaced by the best of six constants,
   on a sample of train tasks; with and without a no-regression rule (every hidden unit the bug
   passed must still pass). This is why ``pass_rate_delta`` has weight 0 by default.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the ids)

CONSTANTS = ("None", "0", "True", "False", "''", "[]")


def webapi_done() -> None:
    from agentgym.environments.webapi.tasks import split_tasks

    for mode in ("sparse", "shaped"):
        env = gym.make("agentgym/WebAPI-v1", split="all", reward_mode=mode)
        for split in ("train", "test"):
            tasks, paid = split_tasks(split), Counter[float]()
            for t in tasks:
                env.reset(options={"task_id": t.id})
                u: Any = env.unwrapped
                _, r, *_ = env.step(u.codec.final_ids("Done."))
                if r != 0:
                    paid[round(float(r), 3)] += 1
            print(f"WebAPI-v1 {mode:6} {split:5}: {len(tasks)} tasks, 'Done.' at once earned nonzero on "
                  f"{sum(paid.values())} {dict(paid) or ''}")
        env.close()


def codefix_constants(backend: str, every: int) -> None:
    from agentgym.environments.codefix.tasks import select_tasks
    from agentgym.environments.codefix.workspace import Limits, Workspace
    from agentgym.sandboxes import make_sandbox

    tasks = select_tasks("train", 1)[::every] + select_tasks("train", 2)[::every + 2]
    plain, strict, example = [], [], ("", "", 0.0)
    sb = make_sandbox(backend)
    try:
        for t in tasks:
            ws = Workspace(sb, t, Limits())
            ws.submit()
            assert ws.report is not None
            start = set(range(ws.report.total)) - {i for i, _ in ws.report.failures}
            m = re.search(rf"def {t.entry_point}\(.*?\).*?:\n", t.buggy_source, re.S)
            assert m is not None
            best = best_strict = 0.0
            for c in CONSTANTS:
                ws.write_file("solution.py", t.buggy_source[: m.end()] + f"    return {c}\n")
                gain = ws.submit().components["pass_rate_delta"]
                rep = ws.report
                now = set(range(rep.total)) - {i for i, _ in rep.failures}
                best = max(best, gain)
                if start <= now:
                    best_strict = max(best_strict, gain)
                if gain > example[2]:
                    example = (t.id, c, gain)
            plain.append(best)
            strict.append(best_strict)
    finally:
        sb.close()
    for name, gains in (("pass-rate gain", plain), ("with no regressions", strict)):
        pos = sum(g > 0 for g in gains)
        print(f"CodeFix-v1 {name:20}: best of {len(CONSTANTS)} constant bodies gains on {pos} of {len(gains)} "
              f"train tasks ({pos / len(gains):.0%}), mean {statistics.mean(gains):.3f}, max {max(gains):.3f}")
    print(f"  largest: {example[0]} `return {example[1]}` gains {example[2]:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sandbox", default="bwrap", help="backend for the CodeFix judge runs (default bwrap)")
    p.add_argument("--every", type=int, default=6, help="CodeFix: every N-th level-1 train task (default 6)")
    args = p.parse_args()
    t0 = time.perf_counter()
    webapi_done()
    codefix_constants(args.sandbox, args.every)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
