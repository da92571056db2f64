"""Docker backend: one locked-down container per episode, from a warm pool.

Each container runs the runner (``sandboxes/runner.py``) as PID 1 and talks to the host
over its attached stdin/stdout (the Docker attach socket, demultiplexed), so networking can
stay disabled and a command costs one fork/exec inside instead of a ``docker exec``.
A :class:`SandboxPool` keeps ``size`` containers started and pinged; ``acquire()`` and
``reset()`` take one from it and a background thread starts the replacement.

Containers carry the labels ``agentgym.sandbox=1`` and ``agentgym.owner=<host>:<pid>:<start>``.
They are removed on ``close()``, by ``weakref.finalize`` on garbage collection and at
interpreter exit; they are started with ``AutoRemove`` and ``StdinOnce`` so that if the
host process dies the attach stream closes, the runner sees EOF and exits, and Docker
removes the container; anything still left (engine restart, SIGKILL mid-start) is found by
label and removed when the next pool starts (or by ``agentgym sandbox clean``).

An engine restart kills every container: what the pool holds may then be stale. ``take()``
throws away a warm container whose attach stream has closed (its runner is gone) and retries a
background start that failed before it was called (the engine may be back), so the first
episode after a restart gets a new container instead of a dead one. Containers stop at once
(``stop_timeout`` 1 s: a sandbox has nothing to save), so an engine stop does not wait 10 s.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentgym.errors import (
    ConfigError,
    SandboxError,
    SandboxStartFailed,
    SandboxStateError,
    SandboxUnavailable,
)
from agentgym.sandboxes.attach import AttachTransport
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT, check_options
from agentgym.sandboxes.image import RUNNER_CMD, SANDBOX_UID, WORKDIR, image_tag, wait_for_build
from agentgym.sandboxes.orphans import LABEL, OWNER_LABEL, owner_id, remove_orphans
from agentgym.sandboxes.runner_client import RunnerClient, RunnerGone, RunnerSandbox

__all__ = ["AttachTransport", "DockerOptions", "DockerSandbox", "SandboxPool",
           "default_pool", "docker_client", "make_docker_sandbox"]

_START_TIMEOUT_S = 60.0


def docker_client(host: str | None = None) -> Any:
    """A pinged docker SDK client, or SandboxUnavailable saying how to get one.

    ``host``: the engine's address (``unix:///path/docker.sock``, ``tcp://...``); default
    ``$DOCKER_HOST``, else the standard socket."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable(
            "the docker backend needs the docker SDK; `pip install docker` "
            "(it is a dependency of agentgym-suite)"
        ) from exc
    where = host or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=120) if host is None else docker.DockerClient(base_url=host, timeout=120)
        # requests would scan os.environ for proxies on every call (pointless on a unix socket);
        # a pool thread doing that while another thread changes the environment gets KeyError.
        client.api.trust_env = False
        client.ping()
    except Exception as exc:
        raise SandboxUnavailable(
            f"expected a running Docker engine at {where}, could not reach it ({exc}); "
            "start it (`sudo systemctl start docker`, or `sudo dockerd &`), make the socket "
            "accessible to this user, or use make_sandbox('bwrap')"
        ) from None  # the reason is in the message: the SDK's chain of 5 tracebacks says nothing more
    return client


@dataclass(frozen=True)
class DockerOptions:
    """Limits of each sandbox container (all enforced by the kernel, not by the runner)."""

    image: str | None = None
    """image tag; default ``agentgym-sandbox:<recipe hash>`` (``agentgym sandbox build``)"""
    mem_limit_bytes: int = 512 << 20
    """cgroup memory limit (no swap); also each command's RLIMIT_AS"""
    cpus: float = 1.0
    """CPU quota in cores"""
    pids_limit: int = 128
    """max processes/threads in the container (fork bombs stop here)"""
    nofile: int = 256
    """open files per process"""
    fsize_bytes: int = 64 << 20
    """largest file a process may write"""
    workdir_size: str = "64m"
    """tmpfs size of /work (disk quota of the episode)"""
    tmp_size: str = "32m"
    """tmpfs size of /tmp"""
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    """bytes kept of each of stdout and stderr"""


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(DockerOptions))


@dataclass
class _Warm:
    container: Any
    conn: RunnerClient

    def alive(self) -> bool:
        """False once the container's attach stream has closed (it exited, or its engine stopped)."""
        hung_up = getattr(self.conn.transport, "hung_up", None)
        return not (hung_up is not None and hung_up())


class SandboxPool:
    """Keeps ``size`` started containers ready; ``acquire()`` returns a sandbox at once.

    Threads: one executor starts replacements and removes used containers in the
    background. ``close()`` removes everything the pool owns (also run at exit).
    """

    runner_client: type[RunnerClient] = RunnerClient  # speaks to a started container's runner

    def __init__(self, size: int = 2, *, client: Any = None, cleanup_orphans: bool = True,
                 **options: Any) -> None:
        check_options("docker", options, OPTION_NAMES)
        self.options = DockerOptions(**options)
        self.size = max(0, int(size))
        self.client = client or docker_client()
        self.image = self.options.image or image_tag()
        try:
            try:
                self.client.images.get(self.image)
            except Exception:
                wait_for_build()  # `agentgym sandbox build` may be running: its image, once done
                self.client.images.get(self.image)
        except Exception as exc:
            raise SandboxUnavailable(
                f"expected the sandbox image {self.image} in the Docker engine, it is missing "
                f"({type(exc).__name__}); build it with `agentgym sandbox build` "
                "(or `python -m agentgym.sandboxes.cli build`)"
            ) from exc
        if cleanup_orphans:
            remove_orphans(self.client)
        # (time.monotonic() when it was ready or failed, the container or why it did not start)
        self._ready: queue.Queue[tuple[float, _Warm | BaseException]] = queue.Queue()
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentgym-pool")
        self._lock = threading.Lock()
        self._closed = False
        self._live: set[str] = set()  # ids of containers this pool created and not removed
        self._finalizer = weakref.finalize(self, _remove_ids, self.client, self._live)
        for _ in range(self.size):
            self._executor.submit(self._fill_one)

    # ---------------------------------------------------------------- containers
    def _create(self) -> _Warm:
        o = self.options
        import docker

        api = self.client.api
        host_config = api.create_host_config(
            auto_remove=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs={
                WORKDIR: f"rw,exec,nosuid,nodev,size={o.workdir_size},uid={SANDBOX_UID},"
                f"gid={SANDBOX_UID},mode=0755",
                "/tmp": f"rw,exec,nosuid,nodev,size={o.tmp_size},mode=1777",
            },
            shm_size="16m",
            mem_limit=o.mem_limit_bytes,
            memswap_limit=o.mem_limit_bytes,
            nano_cpus=int(o.cpus * 1e9),
            pids_limit=o.pids_limit,
            ulimits=[
                docker.types.Ulimit(name="nofile", soft=o.nofile, hard=o.nofile),
                docker.types.Ulimit(name="fsize", soft=o.fsize_bytes, hard=o.fsize_bytes),
                docker.types.Ulimit(name="core", soft=0, hard=0),
            ],
        )
        # The low-level API, because the high-level one cannot set StdinOnce.
        created = api.create_container(
            self.image,
            command=RUNNER_CMD,
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            working_dir=WORKDIR,
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            hostname="sandbox",
            labels={LABEL: "1", OWNER_LABEL: owner_id()},
            # detach=False + stdin_open=True sets StdinOnce: when the host hangs up, stdin
            # reaches EOF, the runner exits and AutoRemove deletes the container.
            detach=False,
            stdin_open=True,
            tty=False,
            network_disabled=True,
            stop_timeout=1,  # the runner (PID 1) ignores SIGTERM: an engine stop would wait 10 s
            host_config=host_config,
        )
        container = self.client.containers.get(created["Id"])
        with self._lock:
            self._live.add(container.id)
            closed = self._closed
        if closed:  # close() ran while the container was being created: it is not ours to start
            self._remove(container.id)
            raise SandboxStateError("this SandboxPool was closed while a sandbox was starting")
        try:
            sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            container.start()
            conn = self.runner_client(AttachTransport(sock))
            pong = conn.call({"op": "ping"}, _START_TIMEOUT_S)
            if not pong.get("ok") or pong.get("pid") != 1:
                raise SandboxError(f"runner in {container.short_id} answered {pong!r} to ping")
        except BaseException as exc:
            self._remove(container.id)
            if self._closed:  # close() removed it under us: say so, not the engine's 409/404
                raise SandboxStateError("this SandboxPool was closed while a sandbox was starting") from exc
            raise
        return _Warm(container, conn)

    def _start(self) -> _Warm:
        """``_create``, tried twice: a container whose runner did not answer its start ping (or
        exited at once) is removed by ``_create`` and replaced once. That is the engine's fault
        (seen under a full CI load), not a reason to fail an episode."""
        try:
            return self._create()
        except RunnerGone as first:
            if self._closed:
                raise
            try:
                return self._create()
            except RunnerGone as exc:
                raise RunnerGone(f"{exc} (two containers tried)") from first

    def _fill_one(self) -> None:
        with self._lock:
            if self._closed:
                return
        try:
            warm: _Warm | BaseException = self._start()
        except BaseException as exc:  # handed to the next acquire() to raise
            warm = exc
        with self._lock:
            if not self._closed:
                self._ready.put((time.monotonic(), warm))
                return
        if isinstance(warm, _Warm):
            self.discard(warm)

    def _remove(self, cid: str) -> None:
        try:
            self.client.api.remove_container(cid, force=True)
        except Exception:  # already gone (auto-remove) or removal in progress
            pass
        with self._lock:
            self._live.discard(cid)

    def discard(self, warm: _Warm) -> None:
        """Throw a used container away, in the background."""
        warm.conn.close()
        with self._lock:
            if not self._closed:
                try:
                    self._executor.submit(self._remove, warm.container.id)
                    return
                except RuntimeError:  # interpreter shutting down: no new threads
                    pass
        self._remove(warm.container.id)

    def _submit_fill(self) -> None:
        """Start a replacement in the background (the caller holds the lock; pool open)."""
        try:
            self._executor.submit(self._fill_one)
        except RuntimeError:  # interpreter shutting down: acquire() starts one itself
            pass

    def take(self) -> _Warm:
        """A started container whose runner is still there; a replacement starts in the background.

        A warm container that died while it waited (an engine restart kills them all) is thrown
        away and replaced; a background start that failed before this call is tried again, not
        raised: only a failure seen while this call waits reaches the caller."""
        asked = time.monotonic()
        with self._lock:
            if self._closed:
                raise SandboxStateError("this SandboxPool is closed; create a new one")
            if self.size > 0:
                self._submit_fill()
        if self.size == 0:
            try:
                return self._start()
            except (SandboxUnavailable, SandboxStateError):
                raise
            except Exception as exc:
                raise _start_failed(exc) from exc
        wait = _START_TIMEOUT_S * 3  # two tries (``_start``), then some
        while True:
            try:
                at, item = self._ready.get(timeout=max(0.0, asked + wait - time.monotonic()))
            except queue.Empty:
                raise SandboxStartFailed(
                    f"no sandbox container was ready within {wait:.0f} s (the engine is overloaded or "
                    "stuck: check `docker ps` and the engine's log), or use a larger pool") from None
            if isinstance(item, _Warm):
                if item.alive():
                    return item
                self.discard(item)  # stale: its container is gone
            elif at >= asked:
                if isinstance(item, SandboxUnavailable):
                    raise item
                raise _start_failed(item) from item
            with self._lock:  # a replacement for the stale item, whose result this call waits for
                if self._closed:
                    raise SandboxStateError("this SandboxPool was closed while a sandbox was starting")
                self._submit_fill()

    # ---------------------------------------------------------------- public
    def acquire(self) -> DockerSandbox:
        """A fresh sandbox, taken from the warm containers (no container start waited for)."""
        return DockerSandbox(pool=self)

    def close(self) -> None:
        """Stop refilling and remove every container this pool started. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        while True:
            try:
                _, item = self._ready.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Warm):
                item.conn.close()
        self._finalizer()

    def __deepcopy__(self, memo: dict[int, Any]) -> SandboxPool:
        # gym.make and check_env deep-copy env kwargs; a pool is a shared resource, not a value.
        return self

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start_failed(exc: BaseException) -> SandboxStartFailed:
    """The error an episode gets when no container could be started for it."""
    import requests

    if isinstance(exc, requests.exceptions.ConnectionError):  # the engine is down or restarting
        return SandboxStartFailed(
            f"could not start a sandbox container: the Docker engine does not answer ({exc}); check "
            "that it runs (`docker info`; DOCKER_HOST names a non-default engine): the next reset "
            "tries again")
    return SandboxStartFailed(f"could not start a sandbox container: {exc}")


def _remove_ids(client: Any, ids: set[str]) -> None:
    for cid in list(ids):
        try:
            client.api.remove_container(cid, force=True)
        except Exception:
            pass
        ids.discard(cid)


def _release(pool: SandboxPool, holder: dict[str, _Warm]) -> None:
    warm = holder.pop("warm", None)
    if warm is not None:
        pool.discard(warm)  # removes it at once when the pool is closed


class DockerSandbox(RunnerSandbox):
    """A sandbox backed by one pool container; ``reset()`` swaps in a fresh container."""

    backend = "docker"
    workdir = WORKDIR

    def __init__(self, *, pool: SandboxPool) -> None:
        o = pool.options
        super().__init__(output_limit=o.output_limit,
                         rlimits={"as": o.mem_limit_bytes, "core": 0})
        self.pool = pool
        self._owns_pool = False
        self._holder: dict[str, _Warm] = {}
        # GC and interpreter exit both land here; it never references self.
        self._finalizer = weakref.finalize(self, _release, pool, self._holder)
        self._connection()

    @property
    def container_id(self) -> str | None:
        warm = self._holder.get("warm")
        return warm.container.id if warm else None

    def _start(self) -> RunnerClient:
        warm = self.pool.take()
        self._holder["warm"] = warm
        return warm.conn

    def _stop(self, conn: RunnerClient) -> None:
        _release(self.pool, self._holder)

    def _close(self) -> None:
        super()._close()
        self._finalizer()
        if self._owns_pool:
            self.pool.close()


_default: SandboxPool | None = None
_default_options: dict[str, Any] = {}
_default_lock = threading.Lock()


def default_pool(**options: Any) -> SandboxPool:
    """The process-wide pool used by ``make_sandbox("docker")`` (created on first use).

    Its size is ``$AGENTGYM_SANDBOX_POOL_SIZE`` (default 2): set it to about the number of
    episodes that reset together (e.g. 8 for 8 concurrent episodes). Options (``size`` and
    :class:`DockerOptions` fields) apply when the pool is created; asking for other options
    while it exists is a ``ConfigError`` (close it first, or build your own ``SandboxPool``).
    """
    global _default, _default_options
    with _default_lock:
        if _default is None or _default._closed:
            check_options("docker", {k: v for k, v in options.items() if k != "size"}, OPTION_NAMES)
            options.setdefault("size", int(os.environ.get("AGENTGYM_SANDBOX_POOL_SIZE", "2")))
            _default = SandboxPool(**options)
            _default_options = dict(options)
        elif options and any(_default_options.get(k, _DEFAULTS.get(k)) != v for k, v in options.items()):
            raise ConfigError(
                f"the shared docker sandbox pool already exists with {_default_options}; it cannot "
                f"take {options} now. Close it first (default_pool().close()), or build your own "
                "SandboxPool(size, **options) / make_sandbox('docker', **options) for other settings")
        return _default


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(DockerOptions)}


def make_docker_sandbox(*, pool: SandboxPool | None = None, **options: Any) -> DockerSandbox:
    """``make_sandbox("docker", ...)``: from ``pool``, from a private pool built with
    ``options`` (:class:`DockerOptions` fields; it starts this sandbox's container and keeps
    ``pool_size`` more warm for its resets, default 0), or, with no options, from the shared
    pool (:func:`default_pool`)."""
    if pool is None:
        check_options("docker", options, (*OPTION_NAMES, "pool_size"))
        size = options.pop("pool_size", None)
        if options or size is not None:
            pool = SandboxPool(size=0 if size is None else size, **options)
            sb = pool.acquire()
            sb._owns_pool = True  # a private pool lives as long as its sandbox
            weakref.finalize(sb, pool.close)
            return sb
        pool = default_pool()
    elif options:
        raise ConfigError(f"pass either pool= or options, not both: the pool's options apply "
                          f"(got {sorted(options)})")
    return pool.acquire()
