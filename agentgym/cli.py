"""The ``agentgym`` command.

    agentgym list                       registered environments
    agentgym sandbox build|clean|status the code-execution sandbox image and containers
    agentgym demo [ENV_ID ...]          run the scripted oracle policies and print per-env results
    agentgym serve ENV_ID               serve an environment over WebSocket/HTTP (agentgym/Remote-v0)
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

    ids = args.env_ids or [i for i in ("agentgym/Math-v1", "agentgym/MathCalc-v1") if i in ORACLES]
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


def _serve(args: argparse.Namespace) -> int:
    import agentgym
    from agentgym.remote.server import serve
    from agentgym.remote.sessions import SessionManager, parse_env_kwarg
    from agentgym.remote.wire import SAFE_KWARGS, Limits

    if args.env_id not in agentgym.registered_ids():
        print(f"{args.env_id!r} is not a registered environment; known: {', '.join(agentgym.registered_ids())}",
              file=sys.stderr)
        return 2
    limits = Limits(max_sessions=args.max_sessions, max_message_bytes=args.max_message_bytes,
                    idle_timeout_s=args.idle_timeout, detach_grace_s=args.detach_grace)
    manager = SessionManager(args.env_id, limits=limits, tokenizer=args.tokenizer,
                             env_kwargs=dict(parse_env_kwarg(kv) for kv in args.env_kwarg),
                             allow_kwargs=SAFE_KWARGS | set(args.allow_kwarg))
    serve(manager, host=args.host, port=args.port, log_level=args.log_level, parent_pid=args.parent_pid)
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
    srv = sub.add_parser("serve", help="serve an environment over WebSocket/HTTP (client: agentgym/Remote-v0)")
    srv.add_argument("env_id", help="a registered id, e.g. agentgym/MathCalc-v1")
    srv.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    srv.add_argument("--port", type=int, default=8700, help="TCP port; 0 picks a free one")
    srv.add_argument("--max-sessions", type=int, default=256, help="env instances held at once")
    srv.add_argument("--max-message-bytes", type=int, default=1 << 20, help="largest request accepted")
    srv.add_argument("--idle-timeout", type=float, default=300.0, help="close HTTP sessions idle this long (s)")
    srv.add_argument("--detach-grace", type=float, default=30.0,
                     help="keep a WebSocket session this long after its connection dropped (s)")
    srv.add_argument("--tokenizer", default=None, help="tokenizer path (default: agentgym's byte tokenizer)")
    srv.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                     help="constructor argument fixed by the server (repeatable), e.g. sandbox=\"docker\"")
    srv.add_argument("--allow-kwarg", action="append", default=[], metavar="KEY",
                     help="let clients set this constructor argument too (repeatable)")
    srv.add_argument("--parent-pid", type=int, default=None, help="exit when this process dies")
    srv.add_argument("--log-level", default="warning")
    srv.set_defaults(fn=_serve)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
