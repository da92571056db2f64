"""The ``agentgym`` command.

    agentgym list                       registered environments (and adapters such as Remote-v0)
    agentgym sandbox build|clean|status the code-execution sandbox image and containers
    agentgym demo [ENV_ID ...]          run the scripted oracle policies and print per-env results
    agentgym serve env ENV_ID           serve an environment over WebSocket/HTTP (agentgym/Remote-v0)
    agentgym serve model --model M      serve a policy behind an OpenAI-compatible API (needs [train])
    agentgym validate ENV_ID [...]      may an environment be on a leaderboard? (oracle 1, no-attempt 0, ...)
    agentgym leaderboard verify|build|suites   replay-verify submissions, build the board
    agentgym webapi clean --database-url DSN   drop the PostgreSQL schemas of dead WebAPI servers
    agentgym --version

Every agentgym command (``agentgym``, ``agentgym-train``, ``agentgym-eval``) reports a mistake
as one line and an exit code, never a traceback (:func:`guarded`): 2 for a usage or config
error, 1 for a failure of the run, 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

__all__ = ["guarded", "main", "plain", "positive_int"]

# reST of docstrings that --help texts are made of: ``code`` and :func:`name` (:class:, :mod:, ...)
_MARKUP = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def plain(text: str) -> str:
    """``text`` without reST markup (``code`` -> code, :func:`f` -> f): what a terminal shows."""
    return _MARKUP.sub(lambda m: m.group(1) or m.group(2), text)


class _PlainWrites:
    """A text stream that writes through :func:`plain` (--help of the commands built from docstrings)."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(plain(text))  # type: ignore[attr-defined]
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--episodes 0`` is refused before anything runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value


# Top-level module -> the extra of pyproject.toml that installs it (the install hint of guarded).
EXTRA_OF = {"torch": "train", "transformers": "train", "safetensors": "train", "tensorboard": "train",
            "matplotlib": "train", "vllm": "gpu", "flash_attn": "gpu", "openai_harmony": "harmony",
            "bpe_openai": "harmony", "ray": "scale", "websockets": "scale", "psycopg": "postgres",
            "reasoning_gym": "interop", "verifiers": "interop", "openenv": "interop", "skyrl_gym": "interop"}


def guarded(prog: str, fn: Callable[[], int], *, on_interrupt: Callable[[], str] | None = None) -> int:
    """Run a command's body; turn agentgym's errors into one line on stderr and an exit code.

    2: a usage or config error (a ConfigError, a bad tokenizer or dataset, an unknown env id);
    1: any other AgentGymError (a service that died, a checkpoint that cannot be read, ...);
    3: a warm start whose tool loop did not learn (``WarmStartFailed``: a failed seed);
    130: Ctrl-C, with ``on_interrupt()``'s line (default: "interrupted");
    2 too for a missing optional dependency: the extra that installs it (``EXTRA_OF``) and the pip line.
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
    except ModuleNotFoundError as e:  # an optional dependency of an extra that is not installed
        top = (e.name or "").partition(".")[0]
        if top not in EXTRA_OF:
            raise
        extra = EXTRA_OF[top]
        print(f"{prog}: this needs {top}, which is not installed (it comes with the [{extra}] extra); "
              f"install it with: pip install 'agentgym-suite[{extra}]' (from a checkout: pip install -e '.[{extra}]')",
              file=sys.stderr)
        return 2


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import agentgym

    try:
        dist = version("agentgym-suite")
    except PackageNotFoundError:
        dist = "not installed"
    return f"agentgym {agentgym.__version__} (distribution agentgym-suite {dist}, python {sys.version.split()[0]})"


# id -> (one line on what it is, what it needs beyond `pip install agentgym-suite`)
_ABOUT: dict[str, tuple[str, str]] = {
    "agentgym/Math-v1": ("procedural math problems, the answer verified symbolically", "nothing more"),
    "agentgym/MathCalc-v1": ("arithmetic with a calculator tool (the CPU quickstart's task)", "nothing more"),
    "agentgym/MathTool-v1": ("math with a python tool that runs in a sandbox",
                             "Docker and the sandbox image (agentgym sandbox build)"),
    "agentgym/CodeFix-v1": ("fix a bug in Python code, judged by hidden tests in a sandbox",
                            "Docker and the sandbox image (agentgym sandbox build)"),
    "agentgym/WebAPI-v1": ("serve a store's customers through a real HTTP API and database",
                           "nothing more (SQLite; PostgreSQL with database_url=postgresql://...)"),
    "agentgym/Lookup-v1": ("a chain of dependent look-ups through a tool that fails at random (retry)",
                           "nothing more"),
    "agentgym/Remote-v0": ("client of an env served by `agentgym serve env` (url=..., env_id=...)",
                           "a running server; the [scale] extra for ws:// URLs"),
    "agentgym/ReasoningGym-v0": ("a reasoning-gym dataset as an env (dataset=...)", "the [interop] extra"),
    "agentgym/Verifiers-v0": ("a verifiers taskset or env as an env (taskset= or env=...)", "the [interop] extra"),
    "agentgym/OpenEnv-v0": ("an OpenEnv server as an env (url=...)", "the [interop] extra and a running server"),
    "agentgym/SkyRL-v0": ("a SkyRL-Gym env class as an env (env_class=..., tasks=...)", "the [interop] extra"),
}


def _about(env_id: str) -> tuple[str, str]:
    """What ``env_id`` is and needs: the table above, else its class docstring's first line."""
    if env_id in _ABOUT:
        return _ABOUT[env_id]
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    doc = ""
    if isinstance(entry, str):
        import importlib

        module, _, name = entry.partition(":")
        try:
            doc = getattr(importlib.import_module(module), name).__doc__ or ""
        except (ImportError, AttributeError) as e:
            doc = f"(cannot import {entry}: {e})"
    return (plain(doc.strip().splitlines()[0]) if doc.strip() else "(no description)"), "-"


def _list(_: argparse.Namespace) -> int:
    import agentgym
    from agentgym.registration import ADAPTERS, INTEROP

    groups = [("environments", agentgym.registered_ids()), ("adapters", sorted(ADAPTERS)),
              ("imported from other hubs", sorted(INTEROP))]
    width = max(len(i) for _, ids in groups for i in ids)
    for title, ids in groups:
        print(f"{title}:")
        for env_id in ids:
            what, needs = _about(env_id)
            print(f"  {env_id:<{width}}  {what}; needs: {needs}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from agentgym.oracles import run_oracle
    from agentgym.registration import check_env_id, ids_with

    ids = args.env_ids or ["agentgym/Math-v1", "agentgym/MathCalc-v1"]
    for env_id in ids:
        check_env_id(env_id, ids_with("oracle"), "an environment with a scripted policy")
    from agentgym.leaderboards.cli import parse_kv

    kwargs = parse_kv(args.env_arg, "--env-arg")
    print(f"agentgym demo: {args.episodes} episodes of the scripted oracle on each of {', '.join(ids)}"
          + (f" with {kwargs}" if kwargs else ""), file=sys.stderr, flush=True)
    for env_id in ids:
        env = gym.make(env_id, **kwargs)
        t0 = time.perf_counter()
        try:
            rewards = [run_oracle(env, seed=s).total_reward for s in range(args.episodes)]
        finally:
            env.close()
        dt = time.perf_counter() - t0
        print(f"{env_id:24s} episodes={args.episodes:4d} mean_reward={sum(rewards) / len(rewards):.3f} "
              f"episodes/s={args.episodes / dt:.0f}", flush=True)
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
    demo.add_argument("--env-arg", action="append", metavar="KEY=VALUE",
                      help="gym.make keyword for every env named (repeatable; values read as YAML: "
                           "split=eval, max_turns=4)")
    demo.set_defaults(fn=_demo)
    sub.add_parser("serve", help="env|model: an environment or a policy as a server (see `agentgym serve -h`)")
    sub.add_parser("webapi", help="clean: drop the PostgreSQL schemas of dead WebAPI servers")
    return parser


# Commands of the other packages: name -> ("module:function(argv) -> exit code", wrap in guarded).
# Imported only when run, as gym.make imports an env's entry point: the core imports none of them.
_DELEGATED: dict[str, tuple[str, bool]] = {
    "sandbox": ("agentgym.sandboxes.cli:main", True),
    "leaderboard": ("agentgym.leaderboards.cli:leaderboard_main", False),
    "validate": ("agentgym.leaderboards.cli:validate_main", False),
    "serve": ("agentgym.serving.cli:main", True),
    "webapi": ("agentgym.environments.webapi.cli:main", True),
}


def main(argv: list[str] | None = None) -> int:
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:  # every subcommand's help, whoever's parser prints it
        sys.stdout = _PlainWrites(sys.stdout)  # type: ignore[assignment]
    if argv[:1] and argv[0] in _DELEGATED:
        spec, wrap = _DELEGATED[argv[0]]
        module, _, name = spec.partition(":")
        run: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
        return guarded(f"agentgym {argv[0]}", lambda: run(argv[1:])) if wrap else run(argv[1:])
    args = _parser().parse_args(argv)
    return guarded(f"agentgym {args.cmd}", lambda: args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
