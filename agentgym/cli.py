"""The ``agentgym`` command.

    agentgym list                       registered environments (and adapters such as Remote-v0)
    agentgym sandbox build|clean|status the code-execution sandbox image and containers
    agentgym demo [ENV_ID ...]          run the scripted oracle policies and print per-env results
    agentgym serve ENV_ID               serve an environment over WebSocket/HTTP (agentgym/Remote-v0)
    agentgym validate ENV_ID [...]      may an environment be on a leaderboard? (oracle 1, no-attempt 0, ...)
    agentgym leaderboard verify|build|suites   replay-verify submissions, build the board
    agentgym --version

Every agentgym command (``agentgym``, ``agentgym-train``, ``agentgym-eval``) reports a mistake
as one line and an exit code, never a traceback (:func:`guarded`): 2 for a usage or config
error, 1 for a failure of the run, 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

__all__ = ["guarded", "main", "positive_int"]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--episodes 0`` is refused before anything runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value


def guarded(prog: str, fn: Callable[[], int], *, on_interrupt: Callable[[], str] | None = None) -> int:
    """Run a command's body; turn agentgym's errors into one line on stderr and an exit code.

    2: a usage or config error (a ConfigError, a bad tokenizer or dataset, an unknown env id);
    1: any other AgentGymError (a service that died, a checkpoint that cannot be read, ...);
    3: a warm start whose tool loop did not learn (``WarmStartFailed``: a failed seed);
    130: Ctrl-C, with ``on_interrupt()``'s line (default: "interrupted").
    """
    import gymnasium as gym

    from agentgym.errors import (
        ActionTypeError,
        AgentGymError,
        ConfigError,
        DatasetError,
        TokenizerError,
        WarmStartFailed,
    )

    try:
        return int(fn() or 0)
    except WarmStartFailed as e:
        print(f"{prog}: WARM START FAILED: {e}", file=sys.stderr)
        return 3
    except AgentGymError as e:
        usage = isinstance(e, (ConfigError, TokenizerError, DatasetError, ActionTypeError))
        label = "config error" if isinstance(e, ConfigError) else "error" if usage else type(e).__name__
        print(f"{prog}: {label}: {e}", file=sys.stderr)
        return 2 if usage else 1
    except gym.error.Error as e:  # gymnasium's own: an unknown id ("did you mean ..."), a bad spec
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: {on_interrupt() if on_interrupt else 'interrupted'}", file=sys.stderr)
        return 130


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import agentgym

    try:
        dist = version("agentgym-suite")
    except PackageNotFoundError:
        dist = "not installed"
    return f"agentgym {agentgym.__version__} (distribution agentgym-suite {dist}, python {sys.version.split()[0]})"


def _list(_: argparse.Namespace) -> int:
    import agentgym
    from agentgym.registration import ADAPTERS

    for env_id in agentgym.registered_ids():
        print(env_id)
    for env_id in sorted(ADAPTERS):
        print(f"{env_id}  (adapter: an env served by `agentgym serve ENV_ID`; "
              f"gym.make({env_id!r}, url=..., env_id=...))")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from agentgym.oracles import run_oracle
    from agentgym.registration import check_env_id, ids_with

    ids = args.env_ids or ["agentgym/Math-v1", "agentgym/MathCalc-v1"]
    for env_id in ids:
        check_env_id(env_id, ids_with("oracle"), "an environment with a scripted policy")
    for env_id in ids:
        env = gym.make(env_id)
        t0 = time.perf_counter()
        try:
            rewards = [run_oracle(env, seed=s).total_reward for s in range(args.episodes)]
        finally:
            env.close()
        dt = time.perf_counter() - t0
        print(f"{env_id:24s} episodes={args.episodes:4d} mean_reward={sum(rewards) / len(rewards):.3f} "
              f"episodes/s={args.episodes / dt:.0f}", flush=True)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import agentgym
    from agentgym.registration import check_env_id
    from agentgym.remote.server import serve
    from agentgym.remote.sessions import SessionManager, parse_env_kwarg
    from agentgym.remote.wire import SAFE_KWARGS, Limits

    check_env_id(args.env_id, agentgym.registered_ids())
    limits = Limits(max_sessions=args.max_sessions, max_message_bytes=args.max_message_bytes,
                    idle_timeout_s=args.idle_timeout, detach_grace_s=args.detach_grace)
    manager = SessionManager(args.env_id, limits=limits, tokenizer=args.tokenizer,
                             env_kwargs=dict(parse_env_kwarg(kv) for kv in args.env_kwarg),
                             allow_kwargs=SAFE_KWARGS | set(args.allow_kwarg))
    manager.check()  # one env with the operator's arguments: a typo fails here, not at each client
    serve(manager, host=args.host, port=args.port, log_level=args.log_level, parent_pid=args.parent_pid)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="registered environments").set_defaults(fn=_list)
    sub.add_parser("sandbox", help="build|clean|status the sandbox image (see `agentgym sandbox -h`)")
    sub.add_parser("validate", help="check an env for leaderboards (see `agentgym validate -h`)")
    sub.add_parser("leaderboard", help="verify|build|suites (see `agentgym leaderboard -h`)")
    fmt = argparse.ArgumentDefaultsHelpFormatter
    demo = sub.add_parser("demo", help="run the scripted oracle policies", formatter_class=fmt)
    demo.add_argument("env_ids", nargs="*", metavar="ENV_ID", help="default: Math-v1 and MathCalc-v1")
    demo.add_argument("--episodes", type=positive_int, default=100, help="episodes per env")
    demo.set_defaults(fn=_demo)
    srv = sub.add_parser("serve", help="serve an environment over WebSocket/HTTP (client: agentgym/Remote-v0)",
                         formatter_class=fmt)
    srv.add_argument("env_id", help="a registered id, e.g. agentgym/MathCalc-v1")
    srv.add_argument("--host", default="127.0.0.1", help="bind address (loopback only by default)")
    srv.add_argument("--port", type=int, default=8700, help="TCP port; 0 picks a free one")
    srv.add_argument("--max-sessions", type=positive_int, default=256, help="env instances held at once")
    srv.add_argument("--max-message-bytes", type=positive_int, default=1 << 20, help="largest request accepted")
    srv.add_argument("--idle-timeout", type=float, default=300.0, help="close HTTP sessions idle this long (s)")
    srv.add_argument("--detach-grace", type=float, default=30.0,
                     help="keep a WebSocket session this long after its connection dropped (s)")
    srv.add_argument("--tokenizer", default=None, help="tokenizer name or path (default: agentgym's byte tokenizer)")
    srv.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                     help="constructor argument fixed by the server (repeatable), e.g. sandbox=\"docker\"")
    srv.add_argument("--allow-kwarg", action="append", default=[], metavar="KEY",
                     help="let clients set this constructor argument too (repeatable)")
    srv.add_argument("--parent-pid", type=int, default=None, help="exit when this process dies")
    srv.add_argument("--log-level", default="warning", help="uvicorn's log level")
    srv.set_defaults(fn=_serve)
    return parser


# Commands of the other packages: name -> ("module:function(argv) -> exit code", wrap in guarded).
# Imported only when run, as gym.make imports an env's entry point: the core imports none of them.
_DELEGATED: dict[str, tuple[str, bool]] = {
    "sandbox": ("agentgym.sandboxes.cli:main", True),
    "leaderboard": ("agentgym.leaderboards.cli:leaderboard_main", False),
    "validate": ("agentgym.leaderboards.cli:validate_main", False),
}


def main(argv: list[str] | None = None) -> int:
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in _DELEGATED:
        spec, wrap = _DELEGATED[argv[0]]
        module, _, name = spec.partition(":")
        run: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
        return guarded(f"agentgym {argv[0]}", lambda: run(argv[1:])) if wrap else run(argv[1:])
    args = _parser().parse_args(argv)
    return guarded(f"agentgym {args.cmd}", lambda: args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
