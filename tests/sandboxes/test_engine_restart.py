"""A Docker engine restart, for real: a private ``dockerd`` of our own is stopped and started.

The ``engine`` fixture runs a second Docker engine as root beside the main one, with its own
socket, data root, exec root and pid file, no bridge and no iptables rules (so nothing clashes
with the main engine), and the sandbox image loaded from the main engine. The tests point the
Docker backend at it (``docker_client(host)``) and show:

* a restart between episodes costs nothing: the pool throws away its dead warm containers and
  the next episode gets a new container and solves its task;
* an engine stopped mid-episode ends that episode as an infrastructure fault (no reward, no
  traceback), and the first reset after the engine is back works;
* the trainer's collector loses only the episodes in flight during a restart, records them as
  infrastructure faults and masks them, and the next collection scores again;
* ``agentgym sandbox clean`` removes the containers a killed run left behind (a restart removes
  them too: they are ``AutoRemove`` containers that never ran).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401 - registers the envs
from agentgym.errors import SandboxStartFailed
from agentgym.oracles import get_oracle
from agentgym.sandboxes.docker_backend import SandboxPool, docker_client
from agentgym.sandboxes.orphans import list_sandbox_containers
from agentgym.trainer.rollout.collector import Collector, drop_infra
from agentgym.trainer.rollout.engines.replay import ReplayEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class EngineFailed(RuntimeError):
    """The private engine did not come up (or did not go down)."""


class PrivateEngine:
    """A ``dockerd`` of our own under ``root``; ``start``, ``stop`` and ``restart`` it at will."""

    def __init__(self, root: Path, storage_driver: str) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.storage_driver = storage_driver
        self.proc: subprocess.Popen[bytes] | None = None
        (root / "daemon.json").write_text("{}")  # not the main engine's /etc/docker/daemon.json

    def _ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5.0)
                s.connect(str(self.sock))
                s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                head = s.recv(4096).split(b"\r\n", 1)[0]
        except OSError:
            return False
        return head.startswith(b"HTTP/1.") and b" 200 " in head + b" "

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.root / "dockerd.log").read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def start(self, timeout: float = 120.0) -> None:
        """Start the engine and return once its socket answers ``/_ping``."""
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["dockerd", "--config-file", str(self.root / "daemon.json"), "--host", self.host,
                 "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                 "--pidfile", str(self.root / "docker.pid"), "--bridge=none", "--iptables=false",
                 "--ip6tables=false", "--ip-masq=false", f"--storage-driver={self.storage_driver}",
                 "--shutdown-timeout=10", "--log-level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._ping():
            if self.proc.poll() is not None:
                raise EngineFailed(f"dockerd ({self.storage_driver}) exited with status "
                                   f"{self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise EngineFailed(f"dockerd did not answer /_ping within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the engine stops its containers and its containerd), SIGKILL past ``timeout``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # dockerd and the containerd it started
            except ProcessLookupError:
                pass
            proc.wait(30)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        """Stop the engine, unmount what it left mounted under ``root`` and remove ``root``."""
        pgid = self.proc.pid if self.proc is not None else None
        try:
            self.stop()
        finally:
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)  # anything of its session still running
                except ProcessLookupError:
                    pass
            prefix = str(self.root) + "/"
            with open("/proc/self/mountinfo") as f:
                mounts = [line.split()[4] for line in f]
            for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
                subprocess.run(["umount", "-l", m], check=False, capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)


def _load_image(engine: PrivateEngine, tag: str) -> None:
    save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert save.stdout is not None
    load = subprocess.run(["docker", "-H", engine.host, "load"], stdin=save.stdout,
                          capture_output=True, text=True, timeout=600)
    save.stdout.close()
    if save.wait(600) != 0 or load.returncode != 0:
        raise EngineFailed(f"could not copy {tag} into the private engine: {load.stderr.strip()}")


@pytest.fixture(scope="module")
def engine() -> Iterator[PrivateEngine]:
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.skip("needs dockerd and the docker CLI to run a private Docker engine")
    if os.geteuid() != 0:
        pytest.skip("needs root to run a private Docker engine (dockerd)")
    from agentgym.sandboxes import image

    tag = image.image_tag()
    image.wait_for_build()  # CI builds the image beside the first tests
    docker_client().images.get(tag)  # raises (test error) if the main engine has no image
    # A short root: the engine's unix sockets live under it (108-byte limit on their paths).
    root = Path(tempfile.mkdtemp(prefix="agd-", dir="/tmp"))
    eng: PrivateEngine | None = None
    try:
        failures = []
        for driver in ("overlay2", "vfs"):  # overlay2 fails where /tmp is itself an overlay
            eng = PrivateEngine(root, driver)
            try:
                eng.start()
                break
            except EngineFailed as exc:
                failures.append(str(exc))
                eng.destroy()
                root.mkdir()
                eng = None
        if eng is None:
            raise EngineFailed("no storage driver worked:\n" + "\n".join(failures))
        _load_image(eng, tag)
        yield eng
    finally:
        if eng is not None:
            eng.destroy()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def up(engine: PrivateEngine) -> PrivateEngine:
    """The private engine, started again if a test failed while it was down."""
    if engine.proc is None or engine.proc.poll() is not None:
        engine.start()
    return engine


@pytest.fixture()
def pool(up: PrivateEngine) -> Iterator[SandboxPool]:
    p = SandboxPool(size=2, client=docker_client(up.host))
    yield p
    p.close()


def _codefix(pool: SandboxPool) -> Any:
    return gym.make("agentgym/CodeFix-v1", sandbox=pool, split="train", max_turns=8)


def _oracle_episode(env: Any, seed: int) -> tuple[float, dict[str, Any]]:
    oracle = get_oracle("agentgym/CodeFix-v1")
    env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(np.asarray(oracle(env), dtype=np.int64))
        total += float(reward)
        done = terminated or truncated
    return total, info


def _wait_warm(pool: SandboxPool, n: int, timeout: float = 180.0) -> None:
    """Until ``n`` started containers wait in the pool (it refills in the background)."""
    deadline = time.monotonic() + timeout
    while pool._ready.qsize() < n:
        assert time.monotonic() < deadline, f"the pool did not refill to {n} within {timeout} s"
        time.sleep(0.05)


def _running_ids(engine: PrivateEngine) -> set[str]:
    return {c["Id"] for c in list_sandbox_containers(docker_client(engine.host)) if c.get("State") == "running"}


def test_a_restart_between_episodes_gives_the_next_episode_a_new_container(
        engine: PrivateEngine, pool: SandboxPool) -> None:
    env = _codefix(pool)
    try:
        reward, info = _oracle_episode(env, 3)
        assert reward == 1.0 and "infra_error" not in info, info
        _wait_warm(pool, 2)  # the restart kills these two warm containers and the one in use
        before = _running_ids(engine)
        assert len(before) >= 3
        engine.restart()
        assert not _running_ids(engine) & before

        reward, info = _oracle_episode(env, 4)
        assert reward == 1.0 and "infra_error" not in info, info
        assert env.unwrapped.sandbox.container_id in _running_ids(engine)
        assert env.unwrapped.sandbox.runner_losses == 0  # its container was alive when the episode began
    finally:
        env.close()


def test_an_engine_stopped_mid_episode_ends_it_as_an_infra_fault_and_the_next_reset_works(
        engine: PrivateEngine, pool: SandboxPool, capfd: pytest.CaptureFixture[str]) -> None:
    oracle = get_oracle("agentgym/CodeFix-v1")
    env = _codefix(pool)
    try:
        env.reset(seed=3)
        _, reward, terminated, truncated, info = env.step(oracle(env))  # the fix is written
        assert (reward, terminated, truncated) == (0.0, False, False) and "infra_error" not in info
        engine.stop()
        _, reward, terminated, truncated, info = env.step(oracle(env))  # submit: the judge needs the sandbox
        assert info.get("infra_error"), info
        assert reward == 0.0 and truncated and not terminated  # not an outcome: nothing paid, not "failed"
        assert env.unwrapped.trajectory.meta["infra_error"] == info["infra_error"]
        assert "Traceback" not in info["infra_error"] and "Traceback" not in "".join(capfd.readouterr())
        with pytest.raises(SandboxStartFailed, match="the Docker engine does not answer"):
            env.reset(seed=4)  # an InfraError: the collector counts the episode as lost

        engine.start()
        reward, info = _oracle_episode(env, 4)
        assert reward == 1.0 and "infra_error" not in info, info
    finally:
        env.close()


class _RestartBeforeCall:
    """The oracle's recorded actions (``ReplayEngine``); the Docker engine restarts just before
    generate call number ``at``, while every episode of the collection is in flight."""

    def __init__(self, inner: ReplayEngine, engine: PrivateEngine, at: int) -> None:
        self.inner, self.engine, self.at = inner, engine, at

    def generate(self, prompts: list[list[int]], **kw: Any) -> Any:
        if self.inner.calls == self.at:
            self.engine.restart()
        return self.inner.generate(prompts, **kw)


def test_the_collector_masks_the_episodes_a_restart_cut_and_goes_on(
        engine: PrivateEngine, pool: SandboxPool) -> None:
    solved, unknown = 3, 5  # the replay knows seed 3's oracle; seed 5 gets a wrong final answer (1 turn)
    replay = ReplayEngine.from_oracle(lambda: _codefix(pool), [solved])
    col = Collector.from_factory(lambda: _codefix(pool), 2, _RestartBeforeCall(replay, engine, at=1),
                                 max_new_tokens=4096)
    try:
        hit, _ = col.collect([solved, unknown], temperature=1.0, sample_seed=0)  # no exception
        assert replay.calls == 2
        assert hit[0].infra_error is not None and hit[0].traj.total_reward == 0.0  # in flight at the restart
        assert "sandbox" in hit[0].infra_error.lower(), hit[0].infra_error
        assert hit[1].infra_error is None and hit[1].traj.total_reward == 0.0  # it had ended: a real outcome
        kept, groups, dropped = drop_infra(hit, [0, 1])
        assert dropped == 1 and kept == [hit[1]] and groups == [1]

        col.engine = replay  # no more restarts: new sandboxes from the restarted engine
        after, _ = col.collect([solved, unknown], temperature=1.0, sample_seed=0)
        assert [t.infra_error for t in after] == [None, None]
        assert [t.traj.total_reward for t in after] == [1.0, 0.0]
    finally:
        col.close()


# A run killed while a container was being started: the container exists (created, labelled
# with the run's pid) but was never started, so neither StdinOnce nor AutoRemove will remove it.
_KILLED_MID_START = textwrap.dedent("""
    import sys, time
    import docker.models.containers
    from agentgym.sandboxes.docker_backend import SandboxPool, docker_client

    pool = SandboxPool(size=0, client=docker_client(sys.argv[1]), cleanup_orphans=False)
    held = pool.acquire()  # a running sandbox
    print("held", held.container_id, flush=True)
    def start(self, *args, **kwargs):  # the next container freezes between create and start
        print("created", self.id, flush=True)
        time.sleep(600)
    docker.models.containers.Container.start = start
    pool.acquire()
""")


def _killed_run(engine: PrivateEngine) -> str:
    """Run ``_KILLED_MID_START`` and SIGKILL it once its second container exists; wait until its
    running sandbox has gone by itself (stdin EOF, AutoRemove); return the container left behind."""
    client = docker_client(engine.host)
    child = subprocess.Popen([sys.executable, "-c", _KILLED_MID_START, engine.host],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        lines = [child.stdout.readline(), child.stdout.readline()]  # readiness: both containers exist
        assert [x.split(" ")[0] for x in lines] == ["held", "created"], f"the run stopped early: {lines!r}"
        held, frozen = (x.split()[1] for x in lines)
    finally:
        child.kill()
        child.wait(30)
    deadline = time.monotonic() + 120
    while held in {c["Id"] for c in list_sandbox_containers(client)}:
        assert time.monotonic() < deadline, "the killed run's running sandbox outlived it"
        time.sleep(0.1)
    assert {c["Id"] for c in list_sandbox_containers(client)} == {frozen}  # never started: it stays
    return frozen


def test_sandbox_clean_removes_the_containers_a_killed_run_left(up: PrivateEngine) -> None:
    client = docker_client(up.host)
    frozen = _killed_run(up)
    env = {**os.environ, "DOCKER_HOST": up.host}
    out = subprocess.run([sys.executable, "-m", "agentgym.sandboxes.cli", "clean"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"removed 1 orphaned sandbox containers (owner process gone): {frozen[:12]}"
    assert list_sandbox_containers(client) == []

    _killed_run(up)
    up.restart()  # the engine removes an AutoRemove container that never ran when it restarts
    assert list_sandbox_containers(client) == []
