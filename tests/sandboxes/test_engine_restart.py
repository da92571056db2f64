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
* ``agentgym sandbox clean`` removes the containers a killed run left behind.
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
from agentgym.oracles import get_oracle
from agentgym.sandboxes.docker_backend import SandboxPool, docker_client
from agentgym.sandboxes.orphans import list_sandbox_containers
from agentgym.trainer.engines.replay import ReplayEngine
from agentgym.trainer.rollout import Collector, drop_infra

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
def pool(engine: PrivateEngine) -> Iterator[SandboxPool]:
    if engine.proc is None:
        engine.start()  # a test that failed while the engine was down
    p = SandboxPool(size=2, client=docker_client(engine.host))
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
