"""Reward hacks, measured: what policies that do not do the task earn, env by env.

    .venv/bin/python bench/reward_hacks.py                 # ~6 min on 2 busy cores (CodeFix needs docker)
    .venv/bin/python bench/reward_hacks.py --no-codefix    # without the sandbox
    .venv/bin/python bench/reward_hacks.py --size small --env agentgym/Math-v1   # the sample CI plays
    .venv/bin/python bench/reward_hacks.py --interop --env agentgym/Math-v1      # + the imported envs' cases

The exit status is 1 when any hack earned anything (the table's "paid" column is not all 0).

1. The hack table (agentgym.environments.hacks, the one the tests assert): every built-in env,
   sparse and shaped, on the large task sample of both splits. For each hack: tasks where it
   applies, tasks where it earned anything, and its mean reward. Every "paid" cell must be 0.
2. Control, math envs: the same final answers scored by equivalence alone (no answer form, the
   question not cut out), i.e. what the echo and unreduced-fraction hacks earn without them.
3. WebAPI, the best a policy that never reads the state can do by guessing: the refusal picked
   from the wording (the rule most often right for that template on train) citing the fact
   value most common on train for that rule. Reported, not asserted: a constant guess is right
   where the state happens to agree with it.
4. CodeFix: the partial credit a degenerate program would get from the hidden-test pass rate
   (``pass_rate_delta``), the best of six constant bodies, with and without a no-regression
   rule. This is why ``pass_rate_delta`` has weight 0 by default.
5. With ``--interop``: the imported envs' cases (``INTEROP_CASES``: reasoning-gym datasets with
   partial credit and the no-attempt guard, SkyRL env classes), each hack's paid count, and
   whether a code-executing answer left a file on the host (``tests/environments/interop/
   test_interop_hacks.py`` asserts the same in CI). ~30 s of worker start-up per case.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.hacks import Hack, hack_ids, hack_tasks, hacks_for, play

CONSTANTS = ("None", "0", "True", "False", "''", "[]")
KWARGS: dict[str, dict[str, Any]] = {"agentgym/WebAPI-v1": {"split": "all"},
                                     "agentgym/CodeFix-v1": {"sandbox_seconds": 5.0}}


def _rows(env: gym.Env, hacks: list[Hack], tasks: list[dict[str, Any]]) -> int:
    """Play every hack on every task it applies to and print a row each (applies / paid / mean
    reward); returns how many episodes were paid."""
    bad = 0
    print(f"  {'hack':48s} {'applies':>7s} {'paid':>5s} {'mean':>6s}")
    for hack in hacks:
        rs = [r for r in (play(env, hack, o) for o in tasks) if r is not None]
        paid = sum(r != 0 for r in rs)
        bad += paid
        print(f"  {hack.name:48s} {len(rs):7d} {paid:5d} {statistics.mean(rs) if rs else 0:6.3f}")
    return bad


def hack_table(env_ids: list[str], backend: str, size: str = "large") -> int:
    bad = 0
    for env_id in env_ids:
        for mode in ("sparse", "shaped"):
            kw = dict(KWARGS.get(env_id, {}))
            if env_id == "agentgym/CodeFix-v1":
                kw["sandbox"] = backend
            env = gym.make(env_id, reward_mode=mode, max_turns=6, **kw)
            try:
                tasks = hack_tasks(env_id, env, size)
                print(f"\n{env_id} {mode}: {len(tasks)} tasks")
                bad += _rows(env, hacks_for(env_id), tasks)
            finally:
                env.close()
    return bad


def interop_table(size: str) -> int:
    """The imported envs' hack cases: applies / paid / mean per hack, and the RCE marker file."""
    from pathlib import Path

    from agentgym.environments.hacks import INTEROP_CASES, RCE_TARGET, interop_tasks

    bad = 0
    for case, (env_id, kwargs, hacks) in sorted(INTEROP_CASES.items()):
        for mode in ("sparse", "shaped"):
            env = gym.make(env_id, reward_mode=mode, max_turns=4, **kwargs)
            try:
                tasks = interop_tasks(case, size)
                print(f"\n{case} {mode}: {len(tasks)} tasks")
                bad += _rows(env, hacks(), tasks)
            finally:
                env.close()
            if Path(RCE_TARGET).exists():
                print(f"  HOST FILE WRITTEN: {RCE_TARGET}")
                Path(RCE_TARGET).unlink()
                bad += 1
    return bad


@contextmanager
def equivalence_only() -> Any:
    """Math envs scoring by equivalence alone: the answer form and the question cut switched off
    (the control)."""
    from agentgym.environments.math import env as math_env
    from agentgym.environments.math.verify import verify

    saved = math_env.verify
    math_env.verify = lambda p, r, form=None, given=None, question=None: verify(p, r)  # type: ignore[assignment]
    try:
        yield
    finally:
        math_env.verify = saved


def control(env_ids: list[str], size: str = "large") -> None:
    print("\nControl: the same hacks scored by equivalence alone (no answer form, no question cut), sparse")
    for env_id in env_ids:
        env = gym.make(env_id, max_turns=6)
        try:
            tasks = hack_tasks(env_id, env, size)
            with equivalence_only():
                for hack in hacks_for(env_id):
                    if not hack.name.startswith(("echo", "unreduced", "calculator")):
                        continue
                    rs = [r for r in (play(env, hack, o) for o in tasks) if r is not None]
                    print(f"  {env_id:22s} {hack.name:40s} paid on {sum(r != 0 for r in rs)} of {len(rs)}")
        finally:
            env.close()


def webapi_guess() -> None:
    from agentgym.environments.hacks import _template, _wording_rules
    from agentgym.environments.webapi.tasks import FACTS, split_tasks

    rules = _wording_rules()
    common = {r: Counter(t.fact for t in split_tasks("train") if t.refusal == r).most_common(1)
              for r in FACTS}
    print("\nWebAPI: a policy that never reads the state, guessing the fact (rule from the wording, the fact "
          "value most common on train for that rule)")
    for split in ("train", "eval"):
        tasks = split_tasks(split)
        forbidden = [t for t in tasks if t.forbidden]
        # A status or a low stock is cited with its record's date or SKU, which no guess knows.
        won = [t for t in forbidden if rules.get(_template(t.prompt)) == t.refusal and common[t.refusal]
               and common[t.refusal][0][0] == t.fact and t.proof is None]
        by_rule = Counter(t.refusal for t in won)
        served = [t for t in tasks if not t.forbidden and rules.get(_template(t.prompt)) is None]
        print(f"  {split:5s}: won {len(won)} of {len(forbidden)} forbidden tasks {dict(by_rule)}; "
              f"(it serves {len(served)} of {len(tasks) - len(forbidden)} allowed ones only by doing them)")
    print("  facts guessed: " + ", ".join(f"{r}={c[0][0]} ({c[0][1]} train tasks)" for r, c in common.items() if c))


def codefix_constants(backend: str, every: int) -> None:
    from agentgym.environments.codefix.tasks import select_tasks
    from agentgym.environments.codefix.workspace import Limits, Workspace
    from agentgym.sandboxes import make_sandbox

    tasks = select_tasks("train", 1)[::every] + select_tasks("train", 2)[::every + 2]
    plain, strict, example = [], [], ("", "", 0.0)
    sb = make_sandbox(backend)
    try:
        for t in tasks:
            ws = Workspace(sb, t, Limits(sandbox_seconds=1e6))
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
    print()
    for name, gains in (("pass-rate gain", plain), ("with no regressions", strict)):
        pos = sum(g > 0 for g in gains)
        print(f"CodeFix-v1 {name:20}: best of {len(CONSTANTS)} constant bodies gains on {pos} of {len(gains)} "
              f"train tasks ({pos / len(gains):.0%}), mean {statistics.mean(gains):.3f}, max {max(gains):.3f}")
    print(f"  largest: {example[0]} `return {example[1]}` gains {example[2]:.3f} (weight 0 by default: paid 0)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sandbox", default="docker", help="backend for the CodeFix episodes (default docker)")
    p.add_argument("--every", type=int, default=6, help="CodeFix pass-rate: every N-th level-1 train task")
    p.add_argument("--no-codefix", action="store_true", help="skip CodeFix (no sandbox needed)")
    p.add_argument("--size", choices=("small", "large"), default="large",
                   help="task sample: 'small' is the one the tests play, 'large' (default) the fuller one")
    p.add_argument("--env", action="append", choices=hack_ids(), metavar="ID",
                   help=f"only this environment (repeatable; default all of {hack_ids()})")
    p.add_argument("--interop", action="store_true", help="also the imported envs' cases (reasoning-gym, SkyRL)")
    args = p.parse_args()
    t0 = time.perf_counter()
    ids = sorted(args.env or hack_ids())
    if args.no_codefix:
        ids = [i for i in ids if i != "agentgym/CodeFix-v1"]
    bad = hack_table(ids, args.sandbox, args.size)
    control([i for i in ids if "Math" in i], args.size)
    if "agentgym/WebAPI-v1" in ids:
        webapi_guess()
    if "agentgym/CodeFix-v1" in ids:
        codefix_constants(args.sandbox, args.every)
    if args.interop:
        bad += interop_table(args.size)
    print(f"\nhack table: {bad} paid episodes (must be 0); {time.perf_counter() - t0:.0f} s, "
          f"load {os.getloadavg()[0]:.1f}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
