"""Starting, sharing, restarting and stopping the store's server process (client side).

One server process hosts many episodes, so every environment in a Python process that asks
for the same configuration shares one :class:`ServerProcess` through a module-level,
reference-counted registry: ``acquire`` starts it on first use, ``release`` stops it when
the last environment lets go, and ``atexit`` stops whatever is left. If the parent dies
without running ``atexit`` (SIGKILL), the server notices on its own (it watches its parent
pid) and exits. A dead server is detected by ``ensure`` and started again on a new port.

The server is launched by module path (``wire.SERVE_MODULE``); nothing here imports it.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from agentgym.environments.webapi.store_wire import READY_PREFIX, SERVE_MODULE
from agentgym.errors import ServiceError

__all__ = ["ServerConfig", "ServerProcess", "acquire", "live_servers", "release"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    database_url: str | None = None  # None: SQLite files in a temp dir
    test_endpoints: bool = False  # serve the test-only slow endpoint
    start_timeout_s: float = 30.0


class ServerProcess:
    """One uvicorn process on a free loopback port."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str = ""
        self.restarts = -1  # incremented by each start: 0 after the first
        self._lock = threading.Lock()
        self._log_path = ""
        self._data_dir = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> str:
        """The server's base URL, (re)starting the process if it is not running."""
        with self._lock:
            if not self.alive():
                self._stop_locked()
                self._start_locked()
            return self.url

    def restart(self, failed_url: str | None = None) -> str:
        """Stop and start again; with ``failed_url``, only if no one restarted it since."""
        with self._lock:
            if failed_url is None or self.url == failed_url:
                self._stop_locked(force=failed_url is not None)  # a hung server gets no grace
                self._start_locked()
            return self.url

    def _start_locked(self) -> None:
        cmd = [sys.executable, "-m", SERVE_MODULE, "--parent-pid", str(os.getpid())]
        if self.config.database_url:
            cmd += ["--database-url", self.config.database_url]
        else:
            # Our temp dir: the server deletes it on the way out, and so do we after a kill.
            self._data_dir = tempfile.mkdtemp(prefix="agentgym-webapi-")
            cmd += ["--data-dir", self._data_dir, "--delete-data-dir"]
        if self.config.test_endpoints:
            cmd.append("--test-endpoints")
        fd, self._log_path = tempfile.mkstemp(prefix="agentgym-webapi-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            # stderr goes to a file (never a pipe nobody drains); stdout only carries the ready line.
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.config.start_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 256)
                if not chunk:
                    break
                line += chunk
        text = line.decode(errors="replace").strip()
        if not text.startswith(READY_PREFIX):
            log_tail = self._log_tail()
            self._stop_locked()
            raise ServiceError(
                f"the WebAPI server did not start within {self.config.start_timeout_s:.0f} s "
                f"(expected a '{READY_PREFIX}' line, got {text!r}). Server log:\n{log_tail}\n"
                "Check that the database_url is reachable and that loopback sockets are allowed.")
        # Started: the log only mattered for a failed start. Unlinking it now means a parent
        # that dies without stop() leaves no file behind (the server keeps its open handle).
        self._remove_log()
        fields = dict(part.split("=", 1) for part in text.split()[1:])
        self.url = f"http://127.0.0.1:{int(fields['port'])}"
        self.restarts += 1

    def _log_tail(self) -> str:
        try:
            with open(self._log_path, "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def _remove_log(self) -> None:
        if self._log_path:
            try:
                os.remove(self._log_path)
            except OSError:
                pass
            self._log_path = ""

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self, force: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                # SIGTERM: uvicorn drains requests (2 s at most) and the store deletes its files.
                proc.kill() if force else proc.terminate()
                try:
                    proc.wait(8)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
        self._remove_log()
        if self._data_dir:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = ""


# ---------------------------------------------------------------------------- sharing
_servers: dict[ServerConfig, tuple[ServerProcess, int]] = {}  # config -> (server, refcount)
_registry_lock = threading.Lock()


def acquire(config: ServerConfig) -> ServerProcess:
    """The shared server for ``config`` (started on first use). Pair with :func:`release`."""
    with _registry_lock:
        server, refs = _servers.get(config, (None, 0))
        if server is None:
            server = ServerProcess(config)
        _servers[config] = (server, refs + 1)
    try:
        server.ensure()
    except BaseException:
        release(server)
        raise
    return server


def release(server: ServerProcess) -> None:
    with _registry_lock:
        entry = _servers.get(server.config)
        if entry is None or entry[0] is not server:
            return
        refs = entry[1] - 1
        if refs > 0:
            _servers[server.config] = (server, refs)
            return
        del _servers[server.config]
    server.stop()


def live_servers() -> list[ServerProcess]:
    with _registry_lock:
        return [s for s, _ in _servers.values()]


@atexit.register
def _stop_all() -> None:
    with _registry_lock:
        servers = [s for s, _ in _servers.values()]
        _servers.clear()
    for s in servers:
        s.stop()
