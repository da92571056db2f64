"""The same environment over PostgreSQL (one schema per episode).

Uses ``AGENTGYM_TEST_POSTGRES_DSN`` when set; otherwise starts a throwaway local cluster
with ``initdb``/``pg_ctl`` (Debian: ``apt-get install postgresql``). Skipped when neither
PostgreSQL nor ``psycopg`` is available.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import gymnasium as gym
import pytest

from agentgym.environments.webapi.policies import oracle_action, run_episode
from agentgym.environments.webapi.tasks import all_tasks

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL support needs psycopg: pip install psycopg")


def _pg_bin() -> str | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return os.path.dirname(found)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return dirs[-1] if dirs else None


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    if os.environ.get("AGENTGYM_TEST_POSTGRES_DSN"):
        yield os.environ["AGENTGYM_TEST_POSTGRES_DSN"]
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install postgresql)")
    prefix: list[str] = []
    tmp = tempfile.mkdtemp(prefix="agentgym-pg-")
    if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start a PostgreSQL cluster")
        shutil.chown(tmp, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = os.path.join(tmp, "data")
    run = lambda *cmd: subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)  # noqa: E731
    try:
        run(f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(f"{bindir}/pg_ctl", "-D", data, "-w", "-l", os.path.join(tmp, "log"), "-o",
            f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.skip(f"could not start a local PostgreSQL cluster: {e}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'agw%'")]


def test_oracle_and_isolation_over_postgres(dsn: str) -> None:
    kinds: dict[str, object] = {}
    for t in all_tasks():
        kinds.setdefault(t.kind, t)
    a = gym.make("agentgym/WebAPI-v1", split="all", database_url=dsn)
    b = gym.make("agentgym/WebAPI-v1", split="all", database_url=dsn)
    try:
        for t in kinds.values():
            reward, info = run_episode(a, oracle_action, options={"task_id": t.id})
            assert reward == 1.0, (t.id, info)
        # Two episodes on the same rows at once: each sees only its own writes.
        t = next(t for t in all_tasks() if t.kind == "cancel")
        a.reset(options={"task_id": t.id})
        b.reset(options={"task_id": t.id})
        for op, args in t.plan:
            a.step(a.unwrapped.codec.tool_call_ids(op, args))
        obs, *_ = b.step(b.unwrapped.codec.tool_call_ids("get_order", {"order_id": t.plan[-1][1]["order_id"]}))
        assert '"status": "placed"' in b.unwrapped.tokenizer.decode(obs.tolist())
        assert len(_schemas(dsn)) == 3  # the template and two episodes
    finally:
        a.close()
        b.close()
    assert _schemas(dsn) == []  # everything the server made is dropped when it stops


def test_episode_keys_that_differ_in_case_or_punctuation_get_their_own_schemas(dsn: str) -> None:
    from agentgym.environments.webapi.storage import PostgresStore
    from agentgym.environments.webapi.store_wire import FIXTURES

    store = PostgresStore(FIXTURES, dsn, pool_size=2)
    keys = ("Episode-0001", "episode_0001", "EPISODE-0001", "e" * 64, "e" * 63 + "f")
    try:
        for k in keys:
            store.create(k)
        for i, k in enumerate(keys):
            with store.transaction(k) as tx:
                tx.run("UPDATE products SET stock = ? WHERE id = 1", [100 + i])
        for i, k in enumerate(keys):  # each key kept its own write: no two share a schema
            with store.transaction(k) as tx:
                assert tx.one("SELECT stock FROM products WHERE id = 1")["stock"] == 100 + i, k
        store.drop(keys[0])
        with store.transaction(keys[1]) as tx:
            assert tx.one("SELECT stock FROM products WHERE id = 1")["stock"] == 101
    finally:
        store.close()
