"""PostgreSQL schema names that say which server owns them, and the cleaner that drops the dead's.

Every schema a WebAPI server makes (its fixtures' templates, one per episode) starts with its
owner's prefix ``agw_<host>_<pid>_<start>_<store>_``: a digest of the host name, the server's
pid, that pid's start time in clock ticks since boot (which tells a reused pid apart), and a
random token for each store of the process. A server that
was killed, or lost its database mid-way, cannot drop its schemas; whoever runs next on the same
host can tell from the name alone that their owner is gone:

* every PostgreSQL server store drops the schemas of dead owners when it starts;
* ``agentgym webapi clean --database-url DSN`` does it on demand (``--legacy`` also drops the
  schemas of servers from before owners were named, ``--all`` every agentgym schema: only when
  no WebAPI server uses the database).

Schemas of servers on other hosts are never judged: their pids mean nothing here.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import socket
from typing import Any

from agentgym.sandboxes.orphans import is_orphan, owner_id

__all__ = ["clean_schemas", "is_dead", "owner_prefix", "store_prefix"]

PREFIX = "agw_"
_OWNED = re.compile(r"^agw_([0-9a-f]{8})_(\d+)_(\d+)_")
_LEGACY = re.compile(r"^agw_[0-9a-f]{8}_(?:template|t_\w+|[0-9a-f]{40})$")  # a random prefix: no owner


def _host_tag(host: str) -> str:
    return hashlib.sha256(host.encode()).hexdigest()[:8]


def owner_prefix(pid: int | None = None) -> str:
    """``agw_<host>_<pid>_<start>_`` of process ``pid`` (default: this one)."""
    host, pid_text, start = owner_id(pid).rsplit(":", 2)
    return f"{PREFIX}{_host_tag(host)}_{pid_text}_{start if start.isdigit() else 0}_"


def store_prefix() -> str:
    """A new store's prefix: its process's, and a token of its own (a process may hold several)."""
    return f"{owner_prefix()}{secrets.token_hex(2)}_"


def is_dead(name: str) -> bool:
    """True when schema ``name`` belongs to a server on this host that no longer runs."""
    m = _OWNED.match(name)
    if m is None:
        return False
    tag, pid, start = m.groups()
    host = socket.gethostname()
    if tag != _host_tag(host):
        return False  # another machine's server: not ours to judge
    return is_orphan(f"{host}:{pid}:{start}")


def clean_schemas(conn: Any, *, legacy: bool = False, everything: bool = False) -> list[str]:
    """Drop the agentgym schemas of dead servers (``legacy``: also unowned old ones;
    ``everything``: all of them) through ``conn``, a psycopg connection in autocommit mode;
    return their names."""
    names = [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) "
                                        "ORDER BY nspname", (PREFIX,)).fetchall()]
    doomed = [n for n in names if everything or is_dead(n) or (legacy and _LEGACY.match(n))]
    for name in doomed:  # one statement each: dropping many at once can run out of locks
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return doomed
