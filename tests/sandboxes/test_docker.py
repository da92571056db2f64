"""Docker backend specifics: pool, container settings, cleanup paths, runner loss."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time

import pytest

from agentgym.errors import InfraError, SandboxUnavailable
from agentgym.sandboxes import SandboxPool
from agentgym.sandboxes.docker_backend import docker_client
from agentgym.sandboxes.orphans import (
    LABEL,
    OWNER_LABEL,
    list_sandbox_containers,
    owner_id,
    remove_orphans,
)

# docker_pool: skip (locally) or fail (CI) when there is no engine/image, build it if missing
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_pool")]


def _exists(client, cid: str) -> bool:  # type: ignore[no-untyped-def]
    import docker

    try:
        client.containers.get(cid)
        return True
    except docker.errors.NotFound:
        return False


def _gone_within(client, cid: str, seconds: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _exists(client, cid):
            return True
        time.sleep(0.1)
    return False


def _wait_ready(pool: SandboxPool) -> None:
    deadline = time.monotonic() + 60
    while pool._ready.qsize() < pool.size and time.monotonic() < deadline:
        time.sleep(0.05)


def test_acquire_takes_an_already_started_container(docker_pool: SandboxPool) -> None:
    _wait_ready(docker_pool)
    warm_ids = {w.container.id for _, w in list(docker_pool._ready.queue)}  # type: ignore[union-attr]
    sb = docker_pool.acquire()
    try:
        assert sb.container_id in warm_ids
        assert sb.run("echo hi").stdout == "hi\n"
    finally:
        sb.close()


def test_container_is_locked_down(docker_pool: SandboxPool) -> None:
    sb = docker_pool.acquire()
    try:
        attrs = docker_pool.client.api.inspect_container(sb.container_id)
        hc, cfg = attrs["HostConfig"], attrs["Config"]
        assert hc["NetworkMode"] == "none"
        assert hc["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in hc["SecurityOpt"]
        assert hc["ReadonlyRootfs"] is True
        assert hc["Memory"] == hc["MemorySwap"] == 512 << 20
        assert hc["PidsLimit"] == 128 and hc["NanoCpus"] == 10**9
        assert set(hc["Tmpfs"]) == {"/work", "/tmp"} and "size=64m" in hc["Tmpfs"]["/work"]
        assert cfg["User"] == "1000:1000"
        assert cfg["Labels"][LABEL] == "1" and cfg["Labels"][OWNER_LABEL] == owner_id()
        assert hc["AutoRemove"] is True and cfg["StdinOnce"] is True
        assert sb.run("cat /proc/1/cmdline | tr '\\0' ' '").stdout.startswith("python3 -I /opt/agentgym/runner.py")
    finally:
        sb.close()


def test_reset_swaps_in_a_fresh_container_and_removes_the_old(docker_pool: SandboxPool) -> None:
    sb = docker_pool.acquire()
    old = sb.container_id
    sb.write_files({"x": "1"})
    sb.reset()
    assert sb.container_id != old and sb.list_files() == []
    assert _gone_within(docker_pool.client, old)
    sb.close()


def test_close_and_gc_remove_the_container(docker_pool: SandboxPool) -> None:
    sb = docker_pool.acquire()
    cid = sb.container_id
    sb.close()
    assert _gone_within(docker_pool.client, cid)
    sb2 = docker_pool.acquire()
    cid2 = sb2.container_id
    del sb2
    gc.collect()
    assert _gone_within(docker_pool.client, cid2)


def test_runner_loss_is_reported_and_the_sandbox_recovers(docker_pool: SandboxPool) -> None:
    sb = docker_pool.acquire()
    try:
        docker_pool.client.api.kill(sb.container_id)  # as if the OOM killer took PID 1
        r = sb.run("echo hi")
        assert r.exit_code == -9 and "runner lost" in r.stderr
        assert sb.runner_losses == 1  # what an episode checks to call it an infrastructure fault
        assert sb.run("echo back").stdout == "back\n"
    finally:
        sb.close()


_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from agentgym.sandboxes import SandboxPool
    pool = SandboxPool(size=1, cleanup_orphans=False)
    sb = pool.acquire()
    while pool._ready.qsize() < 1:   # let the refill finish: a spare container exists too
        time.sleep(0.05)
    print(os.getpid(), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)   # crash: no close, no atexit
    # "exit": leave without close(); atexit (weakref.finalize) must clean up
    """
)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_containers_do_not_outlive_their_process(how: str) -> None:
    client = docker_client()
    out = subprocess.run([sys.executable, "-c", _CHILD, how], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip(), out.stderr
    pid = out.stdout.split()[0]

    def owned() -> list[str]:
        return [c["Id"] for c in list_sandbox_containers(client)
                if (c.get("Labels") or {}).get(OWNER_LABEL, "").split(":")[1:2] == [pid]]

    # exit: removed by the finalizers at interpreter exit; kill: the attach stream closes,
    # the runner reads EOF and exits, and AutoRemove deletes the container
    deadline = time.monotonic() + 30
    while owned() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert owned() == [], f"{how}: containers outlived their owner process"


def test_orphans_of_dead_owners_are_removed() -> None:
    client = docker_client()
    from agentgym.sandboxes.image import image_tag

    dead = subprocess.run(["true"])  # noqa: F841 - its pid is now free
    orphan = client.containers.create(
        image_tag(), command=["true"], labels={LABEL: "1", OWNER_LABEL: owner_id(os.getpid()) + "0"}
    )
    mine = client.containers.create(
        image_tag(), command=["true"], labels={LABEL: "1", OWNER_LABEL: owner_id()}
    )
    try:
        removed = remove_orphans(client)
        # The orphan is gone: removed here, or by the same sweep in another test's process (every
        # pool start runs it), so `removed` may lack it; a container of a live owner stays.
        assert not _exists(client, orphan.id) and _exists(client, mine.id) and mine.short_id not in removed
    finally:
        mine.remove(force=True)
        if _exists(client, orphan.id):
            orphan.remove(force=True)


def test_missing_image_says_how_to_build_it() -> None:
    with pytest.raises(SandboxUnavailable, match="agentgym sandbox build"):
        SandboxPool(size=0, image="agentgym-sandbox:does-not-exist")


def test_sandboxes_from_one_pool_are_isolated_from_each_other(docker_pool: SandboxPool) -> None:
    a, b = docker_pool.acquire(), docker_pool.acquire()
    try:
        a.write_files({"secret.txt": "from a"})
        assert b.list_files() == []
        assert "from a" not in b.run("cat /work/secret.txt /proc/*/root/work/secret.txt 2>&1").stdout
    finally:
        a.close()
        b.close()


def test_cli_build_is_a_no_op_when_up_to_date_and_status_reports(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym.sandboxes.cli import main
    from agentgym.sandboxes.image import image_tag

    assert main(["build"]) == 0
    assert f"{image_tag()} is up to date" in capsys.readouterr().out
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "engine reachable, image present" in out and image_tag() in out
    assert main(["clean"]) == 0
    assert "orphaned sandbox containers" in capsys.readouterr().out


def test_make_sandbox_with_options_gets_a_private_pool_closed_with_it() -> None:
    from agentgym.sandboxes import make_sandbox

    sb = make_sandbox("docker", mem_limit_bytes=256 << 20, pids_limit=32)
    try:
        r = sb.run("cat /sys/fs/cgroup/memory.max 2>/dev/null "
                   "|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        assert r.stdout.strip() == str(256 << 20)
        pool = sb.pool  # type: ignore[attr-defined]
    finally:
        sb.close()
    assert pool._closed


def test_make_sandbox_names_a_misspelled_option() -> None:
    from agentgym.errors import ConfigError
    from agentgym.sandboxes import make_sandbox

    with pytest.raises(ConfigError, match=r"mem_limit.*did you mean 'mem_limit_bytes'"):
        make_sandbox("docker", mem_limit=256 << 20)
    with pytest.raises(ConfigError, match="unknown option"):
        SandboxPool(size=0, memory="1g")


def test_a_private_pool_holds_one_container_per_sandbox() -> None:
    from agentgym.sandboxes import make_sandbox

    sb = make_sandbox("docker", pids_limit=64)
    pool = sb.pool  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:  # a background refill would show up within a second or two
            assert pool._live == {sb.container_id}, pool._live  # type: ignore[attr-defined]
            time.sleep(0.2)
        sb.reset()  # the replacement is started for the reset, not kept warm in advance
        assert pool._live == {sb.container_id}  # type: ignore[attr-defined]
        assert sb.run("echo ok").stdout == "ok\n"
    finally:
        sb.close()
    assert pool._live == set()  # type: ignore[attr-defined]


def test_a_container_start_that_times_out_is_sandbox_unavailable() -> None:
    from agentgym.sandboxes.runner_client import RunnerClient

    class NoTimeToAnswer(RunnerClient):  # the start ping's deadline has passed when the answer is read:
        def call(self, req, timeout):  # type: ignore[no-untyped-def]  # a real timeout, on any machine
            return super().call(req, 0.0 if req.get("op") == "ping" else timeout)

    class Pool(SandboxPool):  # this pool only: the shared pool may be starting containers meanwhile
        runner_client = NoTimeToAnswer

    pool = Pool(size=1)
    try:
        with pytest.raises(SandboxUnavailable, match="runner did not answer in time") as e:
            pool.acquire()
        assert isinstance(e.value, InfraError)  # containers that did not start: the machine's fault
    finally:
        pool.close()
    assert pool._live == set()  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", [0, 1])  # started on demand, and refilled in the background
def test_a_container_whose_runner_never_answered_is_replaced_once(size: int) -> None:
    """A stalled engine can leave a started container's runner unheard (seen once under CI's
    load): the pool removes that container, starts another, and the episode gets a working
    sandbox. Two in a row are an error (the test above)."""
    from agentgym.sandboxes.runner_client import RunnerClient, RunnerGone

    lost: list[int] = []
    removed: list[str] = []

    class LosesTheFirstPing(RunnerClient):
        def call(self, req, timeout):  # type: ignore[no-untyped-def]
            if req.get("op") == "ping" and not lost:
                lost.append(1)
                raise RunnerGone("runner did not answer in time")
            return super().call(req, timeout)

    class Pool(SandboxPool):  # this pool only: the shared pool may be starting containers meanwhile
        runner_client = LosesTheFirstPing

        def _remove(self, cid: str) -> None:
            removed.append(cid)
            super()._remove(cid)

    pool = Pool(size=size)
    try:
        deadline = time.monotonic() + 120
        while size and pool._ready.empty() and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.05)  # the background start (and its replacement) is over before the ask
        sb = pool.acquire()
        assert sb.run("echo ok").stdout == "ok\n"
        assert lost == [1] and len(removed) == 1 and removed[0] != sb.container_id  # type: ignore[attr-defined]
        assert _gone_within(pool.client, removed[0])
        sb.close()
    finally:
        pool.close()
    assert pool._live == set()  # type: ignore[attr-defined]


def test_the_shared_pool_refuses_options_it_was_not_made_with(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.errors import ConfigError
    from agentgym.sandboxes import docker_backend

    # A shared pool of our own for this test (an earlier test may have made the real one).
    monkeypatch.setattr(docker_backend, "_default", None)
    monkeypatch.setattr(docker_backend, "_default_options", {})
    pool = docker_backend.default_pool(size=0)
    try:
        assert docker_backend.default_pool() is pool  # no options: whatever it was made with
        assert docker_backend.default_pool(size=0) is pool  # the same options: the same pool
        with pytest.raises(ConfigError, match="already exists"):
            docker_backend.default_pool(mem_limit_bytes=128 << 20)
    finally:
        pool.close()


def test_closing_a_pool_during_a_container_start_raises_a_state_error_and_leaks_nothing() -> None:
    import threading

    from agentgym.errors import SandboxStateError

    client = docker_client()
    for _attempt in range(3):
        pool = SandboxPool(size=0, client=client, cleanup_orphans=False)
        outcome: list[BaseException | object] = []

        def acquire(p: SandboxPool = pool, out: list = outcome) -> None:  # type: ignore[type-arg]
            try:
                out.append(p.acquire())
            except BaseException as exc:  # noqa: BLE001 - the test inspects what escaped
                out.append(exc)

        t = threading.Thread(target=acquire)
        t.start()
        deadline = time.monotonic() + 30
        while not pool._live and time.monotonic() < deadline:  # created, not yet answering
            time.sleep(0.001)
        created = set(pool._live)
        pool.close()
        t.join(60)
        got = outcome[0]
        if not isinstance(got, BaseException):  # the start won the race: try again
            got.close()  # type: ignore[attr-defined]
            continue
        assert isinstance(got, SandboxStateError), repr(got)
        assert pool._live == set() and created
        assert all(_gone_within(client, cid) for cid in created)
        return
    pytest.fail("the container start always won the race with close(); could not test it")
