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


class Cluster:
    """A PostgreSQL server the tests may stop and start (``pg_ctl`` is None for an external DSN)."""

    def __init__(self, dsn: str, pg_ctl: list[str] | None = None) -> None:
        self.dsn, self.pg_ctl = dsn, pg_ctl

    def _ctl(self, *args: str) -> None:
        if self.pg_ctl is None:
            pytest.skip("AGENTGYM_TEST_POSTGRES_DSN is someone else's server: not ours to restart")
        subprocess.run([*self.pg_ctl, *args], check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        self._ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        self._ctl("-w", "start")

    def restart(self) -> None:
        self._ctl("-m", "fast", "-w", "restart")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if os.environ.get("AGENTGYM_TEST_POSTGRES_DSN"):
        yield Cluster(os.environ["AGENTGYM_TEST_POSTGRES_DSN"])
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
    pg_ctl = [*prefix, f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(tmp, "log"), "-o",
              f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"]
    try:
        run(f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(*pg_ctl[len(prefix):], "-w", "start")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.skip(f"could not start a local PostgreSQL cluster: {e}")
    try:
        yield Cluster(f"postgresql://postgres@127.0.0.1:{port}/postgres", pg_ctl)
    finally:
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def dsn(cluster: Cluster) -> str:
    return cluster.dsn


def _schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'agw%'"))


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
        assert len(_schemas(dsn)) == 4  # the two stores' templates (train, eval) and two episodes
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


# ---------------------------------------------------------------------------- faults heal
def test_a_restart_costs_the_requests_in_flight_and_nothing_after(cluster: Cluster) -> None:
    from agentgym.environments.webapi.storage import PostgresStore, StoreUnavailable
    from agentgym.environments.webapi.store_wire import FIXTURES

    store = PostgresStore(FIXTURES, cluster.dsn, pool_size=2)
    try:
        store.create("episode-aaaa")
        store.create("episode-bbbb")
        with store.transaction("episode-aaaa") as a, store.transaction("episode-bbbb") as b:  # both pooled
            a.run("UPDATE products SET stock = 77 WHERE id = 1")
            b.one("SELECT 1 AS one")
        cluster.stop()
        with pytest.raises(StoreUnavailable):
            store.ping()  # the health check touches the database
        cluster.start()
        store.ping()  # the failed ping marked every pooled connection: none of them is reused
        with store.transaction("episode-aaaa") as a, store.transaction("episode-bbbb") as b:
            b.one("SELECT 1 AS one")
        cluster.restart()  # unseen this time: both pooled connections are dead
        # The first request meets a connection the restart killed: that request is the cost...
        with pytest.raises(StoreUnavailable), store.transaction("episode-aaaa") as a:
            a.one("SELECT stock FROM products WHERE id = 1")
        # ...and every one after it gets a fresh connection (the other pooled one was dead too).
        for _ in range(4):
            store.ping()
        with store.transaction("episode-aaaa") as a:  # the schema outlived the restarts
            assert a.one("SELECT stock FROM products WHERE id = 1")["stock"] == 77
        store.create("episode-cccc", "eval")
        with store.transaction("episode-cccc") as c:
            assert c.one("SELECT COUNT(*) AS n FROM customers")["n"] == 40
    finally:
        store.close()
    assert _schemas(cluster.dsn) == []


@pytest.mark.slow
def test_a_restart_mid_run_loses_only_episodes_in_flight(cluster: Cluster) -> None:
    tasks = [t for t in all_tasks() if t.kind in ("cancel", "return", "order_status")][:6]
    env = gym.make("agentgym/WebAPI-v1", split="all", database_url=cluster.dsn)
    try:
        for t in tasks[:2]:  # the pool's connections are opened and in use before the fault
            assert run_episode(env, oracle_action, options={"task_id": t.id})[0] == 1.0
        t = tasks[2]
        env.reset(options={"task_id": t.id})
        env.step(oracle_action(env))  # in flight across the restart
        cluster.restart()
        lost = 0
        while True:
            _, reward, term, trunc, info = env.step(oracle_action(env))
            if term or trunc:
                break
        if "infra_error" in info:
            lost += 1  # an infrastructure fault, not a 0 for the policy
            assert "database" in info["infra_error"] or "WebAPI" in info["infra_error"], info["infra_error"]
        else:
            assert reward == 1.0  # its connection was a fresh one: the episode went on
        for t in tasks[3:] + tasks[:2]:  # every episode after the restart works
            reward, info = run_episode(env, oracle_action, options={"task_id": t.id})
            assert reward == 1.0 and "infra_error" not in info, (t.id, info)
        # The server's pool rotates (8 connections, >= 4 requests an episode): every one of them was
        # open before the restart, so the in-flight episode's next call met a dead one.
        assert lost == 1
    finally:
        env.close()
    assert _schemas(cluster.dsn) == []


def _start_server(dsn: str) -> tuple[subprocess.Popen[bytes], str]:
    import sys

    from agentgym.environments.webapi.store_wire import READY_PREFIX, SERVE_MODULE

    proc = subprocess.Popen([sys.executable, "-m", SERVE_MODULE, "--database-url", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()  # the ready line: blocks until the server listens
    assert line.startswith(READY_PREFIX), line
    port = line.split("port=")[1].split()[0]
    return proc, f"http://127.0.0.1:{port}"


def test_the_schemas_of_a_killed_server_are_dropped_by_the_cleaner_and_at_start_up(cluster: Cluster) -> None:
    import httpx

    from agentgym.environments.webapi.cli import main as webapi_cli
    from agentgym.environments.webapi.schemas import owner_prefix
    from agentgym.environments.webapi.storage import PostgresStore
    from agentgym.environments.webapi.store_wire import FIXTURES

    def killed_server_schemas() -> list[str]:
        proc, url = _start_server(cluster.dsn)
        owner = owner_prefix(proc.pid)  # while it lives: its start time is part of the name
        try:
            r = httpx.post(f"{url}/_admin/episodes", json={"key": "episode-0001", "fixture": "eval"}, timeout=30)
            assert r.status_code == 201, r.text
        finally:
            proc.kill()
            proc.wait(30)  # reaped: a zombie would still count as alive
        mine = [s for s in _schemas(cluster.dsn) if s.startswith(owner)]
        assert len(mine) == 3  # two templates and the episode, left behind
        return mine

    live = PostgresStore(FIXTURES, cluster.dsn, pool_size=1)  # a live server's schemas stay
    try:
        dead = killed_server_schemas()
        assert webapi_cli(["clean", "--database-url", cluster.dsn]) == 0
        assert not set(dead) & set(_schemas(cluster.dsn))
        assert len([s for s in _schemas(cluster.dsn) if s.startswith(live.prefix)]) == 2
        dead = killed_server_schemas()
        starting = PostgresStore(FIXTURES, cluster.dsn, pool_size=1)  # a store starting drops them too
        try:
            assert sorted(starting.cleaned) == sorted(dead)
        finally:
            starting.close()
        assert len([s for s in _schemas(cluster.dsn) if s.startswith(live.prefix)]) == 2
    finally:
        live.close()
    assert _schemas(cluster.dsn) == []


def test_the_cleaner_judges_only_what_it_can(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym.environments.webapi.cli import main as webapi_cli

    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "agw_deadbeef_template"')  # an older version's: no owner in the name
        conn.execute('CREATE SCHEMA "agw_00000000_1_1_abcd_t_train"')  # another host's server
    assert webapi_cli(["clean", "--database-url", cluster.dsn]) == 0
    assert _schemas(cluster.dsn) == ["agw_00000000_1_1_abcd_t_train", "agw_deadbeef_template"]
    assert webapi_cli(["clean", "--database-url", cluster.dsn, "--legacy"]) == 0
    assert _schemas(cluster.dsn) == ["agw_00000000_1_1_abcd_t_train"]
    assert webapi_cli(["clean", "--database-url", cluster.dsn, "--all"]) == 0
    assert _schemas(cluster.dsn) == []
    assert "dropped 1 agentgym schemas: agw_00000000_1_1_abcd_t_train" in capsys.readouterr().out


def test_the_cleaner_says_in_one_line_when_it_cannot_reach_the_database(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym.environments.webapi.cli import main as webapi_cli

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert webapi_cli(["clean", "--database-url", f"postgresql://nobody@127.0.0.1:{port}/x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach" in err and "Traceback" not in err
