"""Server-side storage: one database per episode, SQLite files or PostgreSQL schemas.

``SqliteStore`` seeds one template file per fixture (a split's store: ``store_wire.FIXTURES``)
once and copies it per episode (a file copy, ~100 us), so episodes never see each other's
writes. ``PostgresStore`` does the same with one schema per episode cloned from a template
schema; ``psycopg`` is imported only there.
Both give out :class:`~agentgym.environments.webapi.db.Tx` transactions per request.

**PostgreSQL faults heal.** A connection that fails (the database restarted, the network
dropped) raises :class:`StoreUnavailable` (HTTP 503: the request's episode is an infrastructure
fault) and marks every pooled connection opened before it as suspect: each is replaced by a
fresh one when next taken, so the requests after the database is back work. ``ping`` (the
health check) touches the database. Schemas are named for their owner (:mod:`.schemas`), and
the schemas of dead servers are dropped when a store starts.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from agentgym.environments.webapi.db import TABLES, Tx, create_schema
from agentgym.environments.webapi.fixture import seed_fixture
from agentgym.environments.webapi.schemas import clean_schemas, store_prefix

__all__ = ["PostgresStore", "SqliteStore", "Store", "StoreUnavailable", "UnknownEpisode", "open_store"]

CONNECT_TIMEOUT_S = 5  # a database that does not accept a connection in this long is down


class UnknownEpisode(KeyError):
    """The episode key names no live episode database."""


class StoreUnavailable(RuntimeError):
    """The database did not answer (connection lost or refused): not the request's fault."""


class Store(Protocol):
    fixtures: dict[str, int]  # fixture name (a split) -> its seed
    def create(self, key: str, fixture: str = "train") -> None: ...
    def drop(self, key: str) -> None: ...
    def has(self, key: str) -> bool: ...
    def count(self) -> int: ...
    def ping(self) -> None: ...  # raises StoreUnavailable when the database does not answer
    location: str  # where the episode databases live (a directory, or a schema prefix)
    inline: bool  # True: cheap enough to run on the event loop; False: use worker threads
    def transaction(self, key: str) -> Any: ...  # context manager yielding a Tx
    def close(self) -> None: ...


class SqliteStore:
    # Queries on a small local file take ~0.1 ms: run them on the event loop, skipping the
    # worker-thread hop that costs more than the query.
    inline = True

    def __init__(self, fixtures: dict[str, int], data_dir: str | None = None, delete_dir: bool = False) -> None:
        self._own_dir = data_dir is None or delete_dir
        self.dir = data_dir or tempfile.mkdtemp(prefix="agentgym-webapi-")
        os.makedirs(self.dir, exist_ok=True)
        self.fixtures = dict(fixtures)
        for part, (name, seed) in enumerate(self.fixtures.items()):
            path = self._template(name)
            if os.path.exists(path):
                os.remove(path)
            conn = sqlite3.connect(path)
            try:
                tx = Tx(conn)
                create_schema(tx)
                seed_fixture(tx, seed, part)
                conn.commit()
            finally:
                conn.close()
        self._keys: set[str] = set()
        self._conns: dict[str, sqlite3.Connection] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.location = self.dir

    def _path(self, key: str) -> str:
        return os.path.join(self.dir, f"ep-{key}.sqlite")

    def _template(self, fixture: str) -> str:
        return os.path.join(self.dir, f"template-{fixture}.sqlite")

    def create(self, key: str, fixture: str = "train") -> None:
        with self._lock:
            old = self._conns.pop(key, None)
            if old is not None:
                old.close()
            # Re-creating a key starts that episode over from the fixture.
            shutil.copyfile(self._template(fixture), self._path(key))
            # isolation_level=None: we issue BEGIN ourselves. One connection per episode, kept
            # open: connecting costs more than the queries of a typical request.
            conn = sqlite3.connect(self._path(key), timeout=5, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA synchronous = OFF")  # per-episode scratch data: no fsync needed
            self._conns[key] = conn
            self._key_locks.setdefault(key, threading.Lock())
            self._keys.add(key)

    def drop(self, key: str) -> None:
        with self._lock:
            if key not in self._keys:
                raise UnknownEpisode(key)
            self._keys.discard(key)
            self._key_locks.pop(key, None)
            conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()
        for suffix in ("", "-journal"):
            try:
                os.remove(self._path(key) + suffix)
            except FileNotFoundError:
                pass

    def has(self, key: str) -> bool:
        return key in self._keys

    def count(self) -> int:
        return len(self._keys)

    def ping(self) -> None:
        if not os.path.exists(self._template(next(iter(self.fixtures)))):
            raise StoreUnavailable(f"the SQLite templates in {self.dir} are gone")

    @contextmanager
    def transaction(self, key: str) -> Iterator[Tx]:
        with self._lock:
            conn, lock = self._conns.get(key), self._key_locks.get(key)
        if conn is None or lock is None:
            raise UnknownEpisode(key)
        # The per-episode lock serialises requests of one episode (they share a connection);
        # episodes never wait for each other.
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield Tx(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            closed, self._closed = self._closed, True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
        if not closed and self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class PostgresStore:
    """One schema per episode in the database named by ``dsn``; dropped again on close."""

    inline = False  # network round trips: run in worker threads, never on the event loop

    def __init__(self, fixtures: dict[str, int], dsn: str, pool_size: int = 8) -> None:
        try:
            import psycopg
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError("PostgreSQL support needs psycopg: pip install 'psycopg[binary]'") from e
        self._psycopg = psycopg
        self._lost = (psycopg.OperationalError, psycopg.InterfaceError)  # connection failures
        self.dsn = dsn
        self.prefix = store_prefix()  # unique per store, and says whose: several may share a database
        # (connection or None, its generation): a failure anywhere bumps the generation, and
        # connections of an older one are replaced when taken (they went down with the database).
        self._pool: queue.Queue[tuple[Any, int]] = queue.Queue()
        self._generation = 0
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.location = f"postgresql schemas {self.prefix}*"
        with self._connect(autocommit=True) as conn:
            self.cleaned = clean_schemas(conn)  # the schemas of servers that died on this host
        for _ in range(pool_size):
            self._pool.put((None, -1))
        self.fixtures = dict(fixtures)
        for part, (name, seed) in enumerate(self.fixtures.items()):
            with self._conn() as conn:
                tmpl = self._template(name)
                conn.execute(f'CREATE SCHEMA "{tmpl}"')
                conn.execute(f'SET LOCAL search_path TO "{tmpl}"')
                tx = Tx(conn, "format")
                create_schema(tx)
                seed_fixture(tx, seed, part)

    def _schema(self, key: str) -> str:
        # A digest, not a folded copy of the key: 'Episode-0001' and 'episode_0001' are two
        # episodes, and PostgreSQL cuts identifiers at 63 bytes (keys may have 64 characters).
        # The rest of the 63 bytes (>= 28 hex digits after the owner's prefix) never collides
        # with a template's name (not hex) nor, in practice, another key's.
        return self.prefix + hashlib.sha256(key.encode()).hexdigest()[:63 - len(self.prefix)]

    def _template(self, fixture: str) -> str:
        return f"{self.prefix}t_{fixture}"

    def _connect(self, autocommit: bool = False) -> Any:
        try:
            return self._psycopg.connect(self.dsn, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S)
        except self._lost as e:
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {e}") from e

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection inside one transaction; connection failures become StoreUnavailable."""
        conn, gen = self._pool.get()
        try:
            if conn is None or gen != self._generation or conn.closed or conn.broken:
                if conn is not None:
                    conn.close()
                conn, gen = None, self._generation
                conn = self._connect()
            with conn.transaction():
                yield conn
        except self._lost as e:
            with self._lock:
                self._generation += 1  # the others were opened before the fault too
            conn.close()
            conn = None
            raise StoreUnavailable(f"the PostgreSQL connection failed: {e}") from e
        finally:
            self._pool.put((conn, gen))

    def ping(self) -> None:
        with self._conn() as conn:
            conn.execute("SELECT 1")

    def create(self, key: str, fixture: str = "train") -> None:
        s, tmpl = self._schema(key), self._template(fixture)
        with self._conn() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{s}"')
            for table in TABLES:
                conn.execute(f'CREATE TABLE "{s}".{table} (LIKE "{tmpl}".{table} INCLUDING ALL)')
                conn.execute(f'INSERT INTO "{s}".{table} SELECT * FROM "{tmpl}".{table}')
        with self._lock:
            self._keys.add(key)

    def drop(self, key: str) -> None:
        with self._lock:
            if key not in self._keys:
                raise UnknownEpisode(key)
            self._keys.discard(key)
        with self._conn() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self._schema(key)}" CASCADE')

    def has(self, key: str) -> bool:
        return key in self._keys

    def count(self) -> int:
        return len(self._keys)

    @contextmanager
    def transaction(self, key: str) -> Iterator[Tx]:
        if key not in self._keys:
            raise UnknownEpisode(key)
        with self._conn() as conn:
            conn.execute(f'SET LOCAL search_path TO "{self._schema(key)}"')
            # One episode's requests are serialised by a row-free advisory lock on its key.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
            yield Tx(conn, "format")

    def close(self) -> None:
        with self._lock:
            closed, self._closed = self._closed, True
        if closed:
            return
        try:
            with self._conn() as conn:
                rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                                    (self.prefix,)).fetchall()
            for (name,) in rows:  # one transaction each: dropping many at once can run out of locks
                with self._conn() as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        except StoreUnavailable:
            pass  # the database is down: the next store to start on this host drops them
        finally:
            while not self._pool.empty():
                conn, _ = self._pool.get()
                if conn is not None:
                    conn.close()


def open_store(fixtures: dict[str, int], database_url: str | None = None, data_dir: str | None = None,
               delete_dir: bool = False) -> Store:
    """The store for ``fixtures`` (name -> seed: one template per split's store)."""
    if database_url and database_url.startswith(("postgres://", "postgresql://")):
        return PostgresStore(fixtures, database_url)
    if database_url:
        raise ValueError(f"database_url must be a postgresql:// DSN, got {database_url!r}")
    return SqliteStore(fixtures, data_dir, delete_dir)
