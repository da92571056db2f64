"""The ``agentgym`` command.

    agentgym list                       registered environments
    agentgym sandbox build|clean|status the code-execution sandbox image and containers
    agentgym demo [ENV_ID ...]          run the scripted oracle policies and print per-env results
    agentgym validate ENV_ID [...]      may an environment be on a leaderboard? (oracle 1, no-attempt 0, ...)
    agentgym leaderboard verify|build|suites   replay-verify submissions, build the board
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main"]


def _list(_: argparse.Namespace) -> int:
    import agentgym

    for env_id in agentgym.registered_ids():
        print(env_id)
    return 0


def _demo(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import agentgym
    from agentgym.oracles import ORACLES, run_oracle

    ids = args.env_ids or [i for i in ("agentgym/Math-v0", "agentgym/MathCalc-v0") if i in ORACLES]
    for env_id in ids:
        if env_id not in ORACLES:
            print(f"{env_id}: no scripted policy; known: {', '.join(sorted(ORACLES))}", file=sys.stderr)
            return 2
        env = gym.make(env_id)
        t0 = time.perf_counter()
        rewards = [run_oracle(env, seed=s).total_reward for s in range(args.episodes)]
        dt = time.perf_counter() - t0
        env.close()
        print(f"{env_id:24s} episodes={args.episodes:4d} mean_reward={sum(rewards) / len(rewards):.3f} "
              f"episodes/s={args.episodes / dt:.0f}")
    del agentgym
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sandbox"]:
        from agentgym.sandboxes.cli import main as sandbox_main

        return sandbox_main(argv[1:])
    if argv[:1] == ["leaderboard"]:
        from agentgym.leaderboards.cli import leaderboard_main

        return leaderboard_main(argv[1:])
    if argv[:1] == ["validate"]:
        from agentgym.leaderboards.cli import validate_main

        return validate_main(argv[1:])
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="registered environments").set_defaults(fn=_list)
    sub.add_parser("sandbox", help="build|clean|status the sandbox image (see `agentgym sandbox -h`)")
    sub.add_parser("validate", help="check an env for leaderboards (see `agentgym validate -h`)")
    sub.add_parser("leaderboard", help="verify|build|suites (see `agentgym leaderboard -h`)")
    demo = sub.add_parser("demo", help="run the scripted oracle policies")
    demo.add_argument("env_ids", nargs="*")
    demo.add_argument("--episodes", type=int, default=100)
    demo.set_defaults(fn=_demo)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
