"""Command lines: ``agentgym-eval``, ``agentgym leaderboard ...`` and ``agentgym validate``.

    agentgym-eval --suite core --policy oracle
    agentgym-eval --suite core --policy hf --policy-arg model=runs/cpu-quickstart --name quickstart
    agentgym leaderboard verify SUBMISSION [...]     replay and re-score; exit 1 if any is rejected
    agentgym leaderboard verify SUB --model PATH     ... and check the actions were sampled from PATH
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

from agentgym.errors import ConfigError

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


def _pick_envs(suite: Any, names: str | None) -> list[str] | None:
    """``--envs``: comma-separated ids of the suite's envs (``Math-v1`` for ``agentgym/Math-v1`` too)."""
    if not names:
        return None
    from agentgym.registration import check_env_id

    ids = [e.id for e in suite.envs]
    bare = {i.split("/", 1)[-1]: i for i in ids}
    return [bare.get(n) or check_env_id(n, ids, f"an env of suite {suite.ref}")
            for n in (x.strip() for x in names.split(",")) if n]


def eval_main(argv: list[str] | None = None) -> int:
    from agentgym.cli import guarded, positive_int
    from agentgym.leaderboards.policies import POLICIES
    from agentgym.leaderboards.suite import list_suites

    ap = argparse.ArgumentParser(
        prog="agentgym-eval", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a leaderboard suite against a policy and write a submission (resumable: run the "
                    "same command again after a kill).",
        epilog="policies: " + ", ".join(sorted(POLICIES)) + "\nexamples:\n"
               "  agentgym-eval --suite calc --policy oracle                      (seconds)\n"
               "  agentgym-eval --suite core --policy oracle --envs Math-v1 --tasks 5   (a verifiable subset)\n"
               "  agentgym-eval --suite core --policy hf --policy-arg model=runs/cpu-quickstart --name quickstart\n"
               "  agentgym-eval --suite core --policy openai-http --policy-arg base_url=http://127.0.0.1:8000 "
               "--policy-arg tokenizer=/models/gpt-oss-20b\n"
               "`agentgym leaderboard suites` lists the suites with their sizes.")
    ap.add_argument("--suite", required=True, help=f"suite name ({', '.join(list_suites())}) or a YAML path")
    ap.add_argument("--policy", required=True, help="policy name (see below)")
    ap.add_argument("--policy-arg", action="append", metavar="KEY=VALUE",
                    help="keyword argument of the policy (repeatable): model=PATH, base_url=URL, tokenizer=...")
    ap.add_argument("--envs", metavar="ID[,ID]", help="run only these envs of the suite (a subset: it verifies, "
                    "boards take only full runs)")
    ap.add_argument("--tasks", type=positive_int, metavar="N", help="run only the first N tasks of each env (a subset)")
    ap.add_argument("--name", help="the submission's name on the board (default: the policy's name)")
    ap.add_argument("--out", help="submission file (default: SUITE-NAME.jsonl.gz in the current directory)")
    ap.add_argument("--workers", type=positive_int, default=4, help="episodes run at once (default 4)")
    ap.add_argument("--notes", default="", help="free text recorded in the submission")
    ap.add_argument("--max-episodes", type=positive_int, default=None,
                    help="stop after this many new episodes (resumable; the progress file is not a submission: "
                         "use --envs/--tasks for a small verifiable run)")
    ap.add_argument("--infra-retries", type=int, default=2, metavar="N",
                    help="play an episode again on a fresh env up to N times when the infrastructure fails "
                         "under it (a dead sandbox, a server that stops answering) (default 2)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    return guarded("agentgym-eval", lambda: _eval(args, argv))


def _eval(args: argparse.Namespace, argv: list[str] | None) -> int:
    from agentgym.leaderboards.evaluate import run_suite
    from agentgym.leaderboards.policies import make_policy
    from agentgym.leaderboards.submission import read_raw
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import score_lines

    if args.infra_retries < 0:
        raise ConfigError(f"--infra-retries must be 0 or more, got {args.infra_retries}")
    suite = load_suite(args.suite)
    envs = _pick_envs(suite, args.envs)
    if envs is not None or args.tasks:
        suite = suite.subset(envs, args.tasks)
    print(f"agentgym-eval: suite {suite.ref}: {suite.size()}"
          + (f" (a subset of {suite.subset_of['suite']})" if suite.subset_of else
             "; a model policy takes from minutes to hours on all of it: --envs ID and --tasks N run a smaller "
             "verifiable subset")
          + f"; {args.workers} at a time, the counter estimates the time left as episodes finish",
          file=sys.stderr, flush=True)
    policy_args = parse_kv(args.policy_arg, "--policy-arg")
    policy = make_policy(args.policy, {"temperature": suite.temperature}, **dict(policy_args))
    name = args.name or policy.name
    tag = "-subset" if suite.subset_of else ""
    out = Path(args.out or f"{suite.name}{tag}-{_slug(name)}.jsonl.gz")
    path = run_suite(suite, policy, out, name=name, policy_name=args.policy, policy_args=policy_args,
                     workers=args.workers, progress=not args.no_progress, notes=args.notes,
                     command=["agentgym-eval", *(sys.argv[1:] if argv is None else argv)],
                     max_episodes=args.max_episodes, infra_retries=args.infra_retries)
    if path is None:
        print(f"stopped after --max-episodes {args.max_episodes}; run the same command again to continue")
        return 0
    footer = read_raw(path).footer or {}
    if footer.get("scores"):
        print(f"{suite.ref} {name}:")
        print("\n".join(score_lines(footer["scores"], footer["overall"], suite.trials)))
    print(f"wrote {path}; check it with: agentgym leaderboard verify {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from agentgym.leaderboards.suite import load_suite
    from agentgym.leaderboards.verify import verify_submission

    suite = load_suite(args.suite) if args.suite else None
    if args.model is None and (args.sample is not None or args.sample_seed is not None or args.tolerance is not None):
        raise ConfigError("--sample, --sample-seed and --tolerance belong to the provenance check: add --model PATH")
    prov = {k: v for k, v in (("sample", args.sample), ("seed", args.sample_seed), ("tolerance", args.tolerance),
                              ("device", args.device)) if v is not None}
    bad = 0
    for path in args.submissions:
        report = verify_submission(path, suite=suite, workers=args.workers, progress=not args.no_progress,
                                   model=args.model, provenance=prov)
        print(report.format())
        if args.json:
            print(json.dumps({"path": str(path), "ok": report.ok, "problems": report.problems,
                              "scores": report.scores, "overall": report.overall, "seconds": report.seconds,
                              "provenance": report.provenance.to_dict() if report.provenance else None}))
        bad += not report.ok
    return 1 if bad else 0


def _build(args: argparse.Namespace) -> int:
    from agentgym.leaderboards.board import build_board

    result = build_board(Path(args.root), site_dir=Path(args.site) if args.site else None, check=args.check,
                         workers=args.workers, progress=not args.no_progress,
                         out=Path(args.out) if args.out else None, models=args.model)
    print(result.format())
    return 0 if result.ok else 1


def _suites(_: argparse.Namespace) -> int:
    from agentgym.leaderboards.suite import list_suites, load_suite

    for name in list_suites():
        s = load_suite(name)
        print(f"{s.ref:24s} {s.size()}")
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
    v.add_argument("--model", metavar="PATH", help="provenance: re-score a random sample of the recorded actions "
                   "under this model (a model dir, run dir or checkpoint) and reject the file if they were not "
                   "sampled from it")
    v.add_argument("--sample", type=int, metavar="N", help="episodes re-scored with --model (default 16)")
    v.add_argument("--sample-seed", type=int, metavar="S", help="which episodes are re-scored (default: random, "
                   "printed so that the check can be repeated)")
    v.add_argument("--tolerance", type=float, metavar="NATS", help="mean |recorded - recomputed log-prob| allowed "
                   "per episode (default 0.05)")
    v.add_argument("--device", help="where --model runs (default cpu)")
    v.set_defaults(fn=_verify)
    b = sub.add_parser("build", help="verify every submission and write the board (Markdown + web page)")
    b.add_argument("--root", default=str(DEFAULT_ROOT), help="the leaderboards folder (default: %(default)s)")
    b.add_argument("--out", help="where LEADERBOARD.md and board/site/ go (default: ROOT in a source checkout, "
                   "./leaderboard for an installed package, whose packaged board is never overwritten)")
    b.add_argument("--site", help="where the web page goes (default: OUT/board/site)")
    b.add_argument("--check", action="store_true",
                   help="write nothing; fail if the committed Markdown board is not what the submissions give")
    b.add_argument("--workers", type=int, default=4)
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--model", action="append", metavar="PATH",
                   help="model weights to check provenance against (repeatable): entries whose header names these "
                        "weights (weights_sha256) are re-scored under them and marked checked, the rest claimed")
    b.set_defaults(fn=_build)
    sub.add_parser("suites", help="list suites with their versions").set_defaults(fn=_suites)
    args = ap.parse_args(argv)
    from agentgym.cli import guarded

    return guarded(f"agentgym leaderboard {args.cmd}", lambda: args.fn(args))


def validate_main(argv: list[str] | None = None) -> int:
    from agentgym.cli import guarded, positive_int

    ap = argparse.ArgumentParser(prog="agentgym validate", description="Check that environments may be on a "
                                 "leaderboard: oracle 1, do-nothing and just-answer 0 (sparse), same seed same "
                                 "tokens, no state shared between episodes.")
    ap.add_argument("env_ids", nargs="*", metavar="ENV_ID")
    ap.add_argument("--all", action="store_true", help="every registered agentgym env (but Remote-v0, a client)")
    ap.add_argument("--env-arg", action="append", metavar="KEY=VALUE",
                    help="gym.make keyword (repeatable); default: every split of the built-in envs")
    ap.add_argument("--max-tasks", type=positive_int, default=None, help="an even sample of at most this many tasks")
    ap.add_argument("--oracle", help="module:function giving the oracle's next action (default: agentgym.oracles)")
    ap.add_argument("--workers", type=positive_int, default=4)
    ap.add_argument("--no-progress", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    if args.all:
        import agentgym

        args.env_ids += [i for i in agentgym.registered_ids() if not i.endswith("/Remote-v0")]
    if not args.env_ids:
        ap.error("name at least one ENV_ID, or pass --all")
    return guarded("agentgym validate", lambda: _validate(args))


def _validate(args: argparse.Namespace) -> int:
    from agentgym.leaderboards.validate import VARIANTS, validate_env
    from agentgym.oracles import load_callable
    from agentgym.registration import check_env_id

    for env_id in args.env_ids:
        check_env_id(env_id)
    if args.oracle:
        load_callable(args.oracle)  # a typo fails here, before any env is built
    failed = 0
    env_kwargs = parse_kv(args.env_arg, "--env-arg")
    if len(args.env_ids) > 1 and not args.no_progress:
        runs = sum(len([env_kwargs] if env_kwargs else VARIANTS.get(i, [{}])) for i in args.env_ids)
        print(f"agentgym validate: {runs} env configurations ({', '.join(args.env_ids)}); each prints its plan "
              "and a time estimate" + ("" if args.max_tasks else "; --max-tasks N checks an even sample of N tasks "
                                       "each (minutes instead of tens of minutes)"), file=sys.stderr, flush=True)
    for env_id in args.env_ids:
        variants = [env_kwargs] if env_kwargs else VARIANTS.get(env_id, [{}])
        for kw in variants:
            report = validate_env(env_id, kw, max_tasks=args.max_tasks, workers=args.workers, oracle=args.oracle,
                                  progress=not args.no_progress)
            print(report.format(), flush=True)
            failed += not report.ok
    return 1 if failed else 0
