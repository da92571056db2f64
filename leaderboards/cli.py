"""Command lines: ``agentgym-eval``, ``agentgym leaderboard ...`` and ``agentgym validate``.

    agentgym-eval --suite core --policy oracle
    agentgym-eval --suite core --policy hf --policy-arg model=runs/cpu-quickstart --name quickstart
    agentgym leaderboard verify SUBMISSION [...]     replay and re-score; exit 1 if any is rejected
    agentgym leaderboard build [--check]             verify every submission, write the board
    agentgym leaderboard suites                      suites, their versions and episode counts
    agentgym validate ENV_ID [...]                   may this env be on a board?
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import AgentGymError, ConfigError

__all__ = ["eval_main", "leaderboard_main", "parse_kv", "validate_main"]


def parse_kv(items: list[str] | None, flag: str) -> dict[str, Any]:
    """``key=value`` pairs; values are read as YAML scalars (``3`` is an int, ``true`` a bool)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {item!r}")
        out[key] = yaml.safe_load(value) if value else ""
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "submission"


def eval_main(argv: list[str] | None = None) -> int:
    from agentgym.leaderboards.evaluate import run_suite
    from agentgym.leaderboards.policies import POLICIES, make_policy
    from agentgym.leaderboards.suite import list_suites, load_suite

    ap = argparse.ArgumentParser(
        prog="agentgym-eval", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a leaderboard suite against a policy and write a submission (resumable: run the "
                    "same command again after a kill).",
        epilog="policies: " + ", ".join(sorted(POLICIES)) + "\nexamples:\n"
               "  agentgym-eval --suite core --policy oracle\n"
               "  agentgym-eval --suite core --policy hf --policy-arg model=runs/cpu-quickstart --name quickstart\n"
               "  agentgym-eval --suite core --policy openai-http --policy-arg base_url=http://127.0.0.1:8000 "
               "--policy-arg tokenizer=/models/gpt-oss-20b")
    ap.add_argument("--suite", default="core", help=f"suite name ({', '.join(list_suites())}) or a YAML path")
    ap.add_argument("--policy", required=True, help="policy name (see below)")
    ap.add_argument("--policy-arg", action="append", metavar="KEY=VALUE",
                    help="keyword argument of the policy (repeatable): model=PATH, base_url=URL, tokenizer=...")
    ap.add_argument("--name", help="the submission's name on the board (default: the policy's name)")
    ap.add_argument("--out", help="submission file (default: SUITE-NAME.jsonl.gz in the current directory)")
    ap.add_argument("--workers", type=int, default=4, help="episodes run at once (default 4)")
    ap.add_argument("--notes", default="", help="free text recorded in the submission")
    ap.add_argument("--max-episodes", type=int, default=None, help="stop after this many new episodes (resumable)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        suite = load_suite(args.suite)
        policy_args = parse_kv(args.policy_arg, "--policy-arg")
        policy = make_policy(args.policy, {"temperature": suite.temperature}, **dict(policy_args))
        name = args.name or policy.name
        out = Path(args.out or f"{suite.name}-{_slug(name)}.jsonl.gz")
        path = run_suite(suite, policy, out, name=name, policy_name=args.policy, policy_args=policy_args,
                         workers=args.workers, progress=not args.no_progress, notes=args.notes,
                         command=["agentgym-eval", *(sys.argv[1:] if argv is None else argv)],
                         max_episodes=args.max_episodes)
    except AgentGymError as e:
        print(f"agentgym-eval: error: {e}", file=sys.stderr)
        return 2
    if path is None:
        print(f"stopped after --max-episodes {args.max_episodes}; run the same command again to continue")
        return 0
    print(f"wrote {path}; check it with: agentgym leaderboard verify {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import verify_submission

    suite = load_suite(args.suite) if args.suite else None
    bad = 0
    for path in args.submissions:
        report = verify_submission(path, suite=suite, workers=args.workers, progress=not args.no_progress)
        print(report.format())
        if args.json:
            print(json.dumps({"path": str(path), "ok": report.ok, "problems": report.problems,
                              "scores": report.scores, "overall": report.overall, "seconds": report.seconds}))
        bad += not report.ok
    return 1 if bad else 0


def _build(args: argparse.Namespace) -> int:
    from agentgym.leaderboards.board import build_board

    result = build_board(Path(args.root), site_dir=Path(args.site) if args.site else None, check=args.check,
                         workers=args.workers, progress=not args.no_progress)
    print(result.format())
    return 0 if result.ok else 1


def _suites(_: argparse.Namespace) -> int:
    from agentgym.leaderboards.suite import list_suites, load_suite

    for name in list_suites():
        s = load_suite(name)
        n = sum(len(e.tasks) for e in s.envs)
        print(f"{s.ref:24s} {len(s.envs)} envs, {n} tasks x {s.trials} trials = {n * s.trials} episodes, "
              f"temperature {s.temperature}")
    return 0


def leaderboard_main(argv: list[str] | None = None) -> int:
    from agentgym.leaderboards.board import DEFAULT_ROOT

    ap = argparse.ArgumentParser(prog="agentgym leaderboard", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="replay and re-score submissions")
    v.add_argument("submissions", nargs="+")
    v.add_argument("--suite", help="verify against this suite file instead of the current one it names")
    v.add_argument("--workers", type=int, default=4)
    v.add_argument("--json", action="store_true", help="also print one JSON line per submission")
    v.add_argument("--no-progress", action="store_true")
    v.set_defaults(fn=_verify)
    b = sub.add_parser("build", help="verify every submission and write the board (Markdown + web page)")
    b.add_argument("--root", default=str(DEFAULT_ROOT), help="the leaderboards folder (default: %(default)s)")
    b.add_argument("--site", help="where the web page goes (default: ROOT/board/site)")
    b.add_argument("--check", action="store_true",
                   help="write nothing; fail if the committed Markdown board is not what the submissions give")
    b.add_argument("--workers", type=int, default=4)
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(fn=_build)
    sub.add_parser("suites", help="list suites with their versions").set_defaults(fn=_suites)
    args = ap.parse_args(argv)
    try:
        return int(args.fn(args))
    except AgentGymError as e:
        print(f"agentgym leaderboard {args.cmd}: error: {e}", file=sys.stderr)
        return 2


def validate_main(argv: list[str] | None = None) -> int:
    from gymnasium import error as gym_error

    from agentgym.leaderboards.validate import VARIANTS, validate_env

    ap = argparse.ArgumentParser(prog="agentgym validate", description="Check that environments may be on a "
                                 "leaderboard: oracle 1, do-nothing and just-answer 0 (sparse), same seed same "
                                 "tokens, no state shared between episodes.")
    ap.add_argument("env_ids", nargs="*", metavar="ENV_ID")
    ap.add_argument("--all", action="store_true", help="every registered agentgym env (but Remote-v0, a client)")
    ap.add_argument("--env-arg", action="append", metavar="KEY=VALUE",
                    help="gym.make keyword (repeatable); default: every split of the built-in envs")
    ap.add_argument("--max-tasks", type=int, default=None, help="an even sample of at most this many tasks")
    ap.add_argument("--oracle", help="module:function giving the oracle's next action (default: agentgym.oracles)")
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args(argv)
    if args.all:
        import agentgym

        args.env_ids += [i for i in agentgym.registered_ids() if not i.endswith("/Remote-v0")]
    if not args.env_ids:
        ap.error("name at least one ENV_ID, or pass --all")
    failed = 0
    try:
        env_kwargs = parse_kv(args.env_arg, "--env-arg")
        for env_id in args.env_ids:
            variants = [env_kwargs] if env_kwargs else VARIANTS.get(env_id, [{}])
            for kw in variants:
                report = validate_env(env_id, kw, max_tasks=args.max_tasks, workers=args.workers,
                                      oracle=args.oracle)
                print(report.format(), flush=True)
                failed += not report.ok
    except (AgentGymError, gym_error.Error) as e:  # gymnasium's: an unknown id ("did you mean ...")
        print(f"agentgym validate: error: {e}", file=sys.stderr)
        return 2
    return 1 if failed else 0
