"""``agentgym webapi clean``: drop the PostgreSQL schemas that dead WebAPI servers left behind.

Wired into the ``agentgym`` command by ``agentgym.cli``; also runnable on its own as
``python -m agentgym.environments.webapi.cli clean --database-url DSN``.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _clean(args: argparse.Namespace) -> int:
    try:
        import psycopg
    except ImportError:
        print("agentgym webapi clean: PostgreSQL support needs psycopg: pip install 'psycopg[binary]'",
              file=sys.stderr)
        return 2
    from agentgym.environments.webapi.schemas import clean_schemas

    try:
        with psycopg.connect(args.database_url, autocommit=True, connect_timeout=10) as conn:
            dropped = clean_schemas(conn, legacy=args.legacy, everything=args.all)
    except psycopg.Error as e:
        why = " ".join(str(e).split())  # psycopg's messages span lines: one line here
        print(f"agentgym webapi clean: cannot reach {args.database_url!r}: {why} "
              "(expected a postgresql:// DSN of a running server)", file=sys.stderr)
        return 1
    what = "agentgym schemas" if args.all else "schemas of dead WebAPI servers on this host"
    print(f"dropped {len(dropped)} {what}{': ' + ' '.join(dropped) if dropped else ''}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agentgym webapi", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    clean = sub.add_parser("clean", help="drop the schemas of WebAPI servers that died (PostgreSQL)")
    clean.add_argument("--database-url", required=True, help="postgresql://... the servers used")
    clean.add_argument("--legacy", action="store_true",
                       help="also drop schemas named before owners were (agw_<8 hex>_...): none of them can be judged")
    clean.add_argument("--all", action="store_true",
                       help="drop every agentgym schema, live servers' too (only when none runs)")
    clean.set_defaults(fn=_clean)
    args = p.parse_args(argv)
    if not args.database_url.startswith(("postgresql://", "postgres://")):
        p.error(f"--database-url must be a postgresql:// DSN, got {args.database_url!r}")
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
