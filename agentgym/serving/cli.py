"""``agentgym serve``: agentgym's servers, one command.

    agentgym serve env ENV_ID [--port 8700] ...     an environment over WebSocket/HTTP (client: agentgym/Remote-v0)
    agentgym serve model --model PATH|tiny [...]    a policy behind an OpenAI-compatible API (needs [train])

Both bind 127.0.0.1 by default. Bound to any other address they require a bearer token on every
request: $AGENTGYM_SERVE_TOKEN, or one generated at start and printed once on stderr.

``agentgym`` hands ``serve ...`` to :func:`main` by module name (the core imports no server).
Parsing imports nothing heavy: ``--help`` answers at once, without torch or uvicorn.
"""

from __future__ import annotations

import argparse
import math
import sys

from agentgym.cli import positive_int
from agentgym.serving.chat_server import REASONING_EFFORTS
from agentgym.serving.env_wire import Limits

__all__ = ["env_limits", "main"]

def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds above 0, got {text!r}")
    return value


# Spellings that were removed: the first word after ``serve`` -> the new spelling.
_OLD = "`agentgym serve ENV_ID` is now `agentgym serve env ENV_ID` (`agentgym serve model` serves a policy)"


def env_limits(args: argparse.Namespace) -> Limits:
    """The limits of ``agentgym serve env`` from its parsed flags."""
    return Limits(max_sessions=args.max_sessions, max_message_bytes=args.max_message_bytes,
                  max_client_sessions=args.max_client_sessions or 0,  # 0: half of --max-sessions
                  idle_timeout_s=args.idle_timeout, detach_grace_s=args.detach_grace,
                  header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout)


def _serve_env(args: argparse.Namespace) -> int:
    import agentgym
    from agentgym.errors import ConfigError
    from agentgym.registration import check_env_id
    from agentgym.serving.env_server import serve
    from agentgym.serving.env_sessions import SessionManager, parse_env_kwarg
    from agentgym.serving.env_wire import SAFE_KWARGS
    from agentgym.serving.guard import server_access

    check_env_id(args.env_id, agentgym.registered_ids())
    try:
        import websockets  # noqa: F401  (uvicorn speaks WebSocket through it)
    except ImportError:
        raise ConfigError("`agentgym serve env` serves its sessions over WebSocket and needs the websockets "
                          "package; install it with: pip install 'agentgym-suite[scale]'") from None
    manager = SessionManager(args.env_id, limits=env_limits(args), tokenizer=args.tokenizer,
                             env_kwargs=dict(parse_env_kwarg(kv) for kv in args.env_kwarg),
                             allow_kwargs=SAFE_KWARGS | set(args.allow_kwarg))
    access = server_access("agentgym serve env", args.host, hosts=args.allow_host, origins=args.allow_origin)
    manager.check()  # one env with the operator's arguments: a typo fails here, not at each client
    serve(manager, host=args.host, port=args.port, log_level=args.log_level, parent_pid=args.parent_pid,
          access=access)
    return 0


def _serve_model(args: argparse.Namespace) -> int:
    from agentgym.errors import ConfigError

    try:
        from agentgym.serving.model_server import ModelLimits, run
    except ImportError as e:  # torch / transformers: the [train] extra
        raise ConfigError(f"`agentgym serve model` needs the trainer's dependencies ({e}); "
                          "install them with: pip install 'agentgym-suite[train]'") from None
    from agentgym.serving.guard import server_access

    access = server_access("agentgym serve model", args.host, hosts=args.allow_host, origins=args.allow_origin)
    run(args.model, host=args.host, port=args.port, device=args.device, model_name=args.served_model_name,
        tokenizer=args.tokenizer, reasoning_effort=args.reasoning_effort, max_tokens=args.max_tokens,
        threads=args.threads, access=access, weights_dirs=args.weights_dir,
        limits=ModelLimits(max_prompt_tokens=args.max_prompt_tokens, max_tokens=args.max_completion_tokens,
                           header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout))
    return 0


def _access_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="accept this Host header name too (repeatable; loopback names and the bound "
                        "address are always accepted)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="accept browser requests from this origin, e.g. https://lab.example.org "
                        "(repeatable; none by default)")


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(prog="agentgym serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True, metavar="{env,model}")
    env = sub.add_parser("env", formatter_class=fmt,
                         help="an environment over WebSocket/HTTP (client: agentgym/Remote-v0)")
    env.add_argument("env_id", metavar="ENV_ID", help="a registered id, e.g. agentgym/MathCalc-v1")
    env.add_argument("--host", default="127.0.0.1", help="bind address (loopback only by default)")
    env.add_argument("--port", type=int, default=8700, help="TCP port; 0 picks a free one")
    env.add_argument("--max-sessions", type=positive_int, default=256, help="env instances held at once")
    env.add_argument("--max-client-sessions", type=positive_int, default=None,
                     help="env instances one client address may hold (default: half of --max-sessions, "
                          "at least 1)")
    env.add_argument("--max-message-bytes", type=positive_int, default=1 << 20, help="largest request accepted")
    env.add_argument("--idle-timeout", type=positive_float, default=300.0,
                     help="close a session (HTTP or WebSocket) with no request for this long (s)")
    env.add_argument("--header-timeout", type=positive_float, default=10.0,
                     help="close a connection that is idle or slow to send its request headers (s)")
    env.add_argument("--body-timeout", type=positive_float, default=30.0,
                     help="refuse an HTTP request whose body takes longer than this (s)")
    env.add_argument("--detach-grace", type=float, default=30.0,
                     help="keep a WebSocket session this long after its connection dropped (s)")
    env.add_argument("--tokenizer", default=None, help="tokenizer name or path (default: agentgym's byte tokenizer)")
    env.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                     help="constructor argument fixed by the server (repeatable), e.g. sandbox=\"docker\"")
    env.add_argument("--allow-kwarg", action="append", default=[], metavar="KEY",
                     help="let clients set this constructor argument too (repeatable)")
    _access_args(env)
    env.add_argument("--parent-pid", type=int, default=None, help="exit when this process dies")
    env.add_argument("--log-level", default="warning", help="uvicorn's log level")
    env.set_defaults(fn=_serve_env)

    model = sub.add_parser("model", formatter_class=fmt,
                           help="a policy behind an OpenAI-compatible API: token-id completions, chat "
                                "completions with tools, weight reload (needs the [train] extra)")
    model.add_argument("--model", required=True, help="checkpoint directory, hub id, or 'tiny'")
    model.add_argument("--host", default="127.0.0.1", help="bind address (loopback only by default)")
    model.add_argument("--port", type=int, default=8000, help="TCP port")
    model.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    model.add_argument("--served-model-name", default="agentgym", help="the model name requests must use")
    model.add_argument("--tokenizer", default=None,
                       help="for chat: a tokenizer path ('byte' = agentgym's ByteTokenizer; default: "
                            "'byte' for tiny models, else the model's own directory)")
    model.add_argument("--reasoning-effort", default="low", choices=REASONING_EFFORTS,
                       help="chat default when a request names none (the environments use low)")
    model.add_argument("--max-tokens", type=positive_int, default=2048, help="chat default completion budget")
    model.add_argument("--max-completion-tokens", type=positive_int, default=4096,
                       help="the most tokens one request may ask to generate per prompt (max_tokens)")
    model.add_argument("--max-prompt-tokens", type=positive_int, default=8192,
                       help="the longest prompt accepted, in tokens (chat: the rendered conversation)")
    model.add_argument("--weights-dir", action="append", default=[], metavar="DIR",
                       help="/reload_weights loads only checkpoints inside this directory (repeatable; "
                            "none: reload is refused). The openai-http engine writes to its checkpoint_dir")
    model.add_argument("--header-timeout", type=positive_float, default=10.0,
                       help="close a connection that is idle or slow to send its request headers (s)")
    model.add_argument("--body-timeout", type=positive_float, default=30.0,
                       help="refuse a request whose body takes longer than this (s)")
    model.add_argument("--threads", type=int, default=1,
                       help="torch intra-op threads (1: a tiny model on a shared CPU decodes ~15x faster "
                            "than with 2 threads fighting for 2 busy cores; raise it for a large model)")
    _access_args(model)
    model.set_defaults(fn=_serve_model)
    return parser


def main(argv: list[str]) -> int:
    """``agentgym serve env|model ...`` -> exit code (wrapped in ``guarded`` by ``agentgym``)."""
    # The old spelling, options first or not (`agentgym serve --port 8700 ENV_ID`): no env|model word.
    if argv and not {"env", "model", "-h", "--help"} & set(argv):
        print(f"agentgym serve: {_OLD}", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    return int(args.fn(args))
