"""Host side of the runner protocol, and the Sandbox base shared by every runner backend.

A backend only has to start a runner (``sandboxes/runner.py``) somewhere and hand back a
:class:`Transport` to its stdin/stdout; :class:`RunnerSandbox` does the rest. The wire format
lives in :mod:`agentgym.sandboxes.runner` (the server) and nowhere else.
"""

from __future__ import annotations

import abc
import base64
import json
import os
import select
import subprocess
import threading
import time
from typing import Any, Protocol

from agentgym.errors import SandboxError, SandboxLost
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT, ExecResult, Sandbox
from agentgym.sandboxes.runner import decode_frame_length, encode_message

__all__ = ["PipeTransport", "RunnerClient", "RunnerGone", "RunnerSandbox", "Transport"]

# Seconds the host waits beyond a command's own timeout: the runner needs a moment to kill
# the process tree, drain the pipes and reap; past this the runner itself is presumed hung.
HOST_GRACE_S = 5.0


class RunnerGone(SandboxLost):
    """The runner stopped answering (killed, out of memory, hung, its container gone with a Docker
    engine restart). Inside a sandbox it triggers one restart; when that fails too it reaches
    the episode as what it is, a lost sandbox: an infrastructure fault (``InfraError``) that
    the env and the trainer count and mask, never a crash of the run."""


class Transport(Protocol):
    def send(self, data: bytes) -> None: ...
    def recv_exact(self, n: int, deadline: float) -> bytes: ...
    def close(self) -> None: ...


class PipeTransport:
    """The runner is a child process of ours; talk over its stdin/stdout pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._w = proc.stdin.fileno()
        self._r = proc.stdout.fileno()
        self._buf = bytearray()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._w, view) :]
        except OSError as exc:
            raise RunnerGone(f"runner stdin closed: {exc}") from exc

    def recv_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerGone("runner did not answer in time")
            r, _, _ = select.select([self._r], [], [], left)
            if not r:
                continue
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RunnerGone(f"runner exited (status {self.proc.poll()})")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class RunnerClient:
    """Request/response calls to one runner. Not thread-safe: one sandbox, one caller."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        self.transport.send(encode_message(req))
        try:
            n = decode_frame_length(self.transport.recv_exact(4, deadline))
        except ValueError as exc:
            raise RunnerGone(f"runner sent a malformed frame: {exc}") from exc
        resp: dict[str, Any] = json.loads(self.transport.recv_exact(n, deadline))
        return resp

    def close(self) -> None:
        self.transport.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _raise_remote(resp: dict[str, Any], path: str = "") -> None:
    kind, msg = resp.get("kind", "Error"), resp.get("error", "")
    if kind == "FileNotFoundError":
        raise FileNotFoundError(f"no regular file in the sandbox work dir at {path!r} ({msg})")
    if kind == "IsADirectoryError":
        raise IsADirectoryError(f"{path!r} is a directory in the sandbox work dir")
    if kind == "PermissionError":  # a planted symlink on the way: never followed
        raise PermissionError(msg)
    if kind == "NotADirectoryError":
        raise NotADirectoryError(msg)
    raise SandboxError(f"sandbox runner failed: {kind}: {msg}")


class RunnerSandbox(Sandbox):
    """A Sandbox whose operations are runner requests. Backends implement start/stop."""

    def __init__(self, *, output_limit: int = DEFAULT_OUTPUT_LIMIT, rlimits: dict[str, int]) -> None:
        super().__init__()
        self.output_limit = int(output_limit)
        self.rlimits = dict(rlimits)
        self._conn: RunnerClient | None = None
        # Runners lost since start (killed container, OOM, engine restart): each restart comes
        # with an empty work dir, so a user of the sandbox (an env's episode) can tell its state is gone.
        self.runner_losses = 0
        # One request at a time on the wire: concurrent callers (an env's tool thread and a
        # watchdog, say) are serialised rather than interleaving frames.
        self._lock = threading.RLock()

    @abc.abstractmethod
    def _start(self) -> RunnerClient:
        """Start a fresh runner with an empty work dir and return a client to it."""

    @abc.abstractmethod
    def _stop(self, conn: RunnerClient) -> None:
        """Tear down the runner behind ``conn`` and everything it started."""

    def _connection(self) -> RunnerClient:
        if self._conn is None:
            self._conn = self._start()
        return self._conn

    def _restart(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._stop(conn)
        self._conn = self._start()

    def _call(self, req: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """A file operation; if the runner is gone, restart once (the work dir is then empty)."""
        with self._lock:
            try:
                return self._connection().call(req, timeout)
            except RunnerGone:
                self.runner_losses += 1
                self._restart()
                return self._connection().call(req, timeout)

    # ------------------------------------------------------------------ hooks
    def _run(self, argv: list[str], stdin: bytes, timeout: float, env: dict[str, str]) -> ExecResult:
        req = {
            "op": "exec", "argv": argv, "stdin": _b64(stdin), "timeout": timeout, "env": env,
            "limit": self.output_limit, "rlimits": self.rlimits,
        }
        with self._lock:
            return self._run_locked(req, timeout)

    def _run_locked(self, req: dict[str, Any], timeout: float) -> ExecResult:
        t0 = time.monotonic()
        try:
            resp = self._connection().call(req, timeout + HOST_GRACE_S)
        except RunnerGone as exc:
            # Hostile code took the runner down (e.g. the OOM killer picked it). The episode
            # continues in a fresh sandbox; the result says what happened.
            elapsed = time.monotonic() - t0
            self.runner_losses += 1
            self._restart()
            return ExecResult(
                stdout="", stderr=f"[agentgym] sandbox runner lost ({exc}); the sandbox was "
                "restarted with an empty work dir\n", exit_code=-9,
                timed_out=elapsed >= timeout, duration_s=elapsed,
            )
        if not resp.get("ok"):
            _raise_remote(resp)
        return ExecResult(
            stdout=base64.b64decode(resp["stdout"]).decode("utf-8", "replace"),
            stderr=base64.b64decode(resp["stderr"]).decode("utf-8", "replace"),
            exit_code=int(resp["exit_code"]),
            timed_out=bool(resp["timed_out"]),
            duration_s=float(resp["duration"]),
            stdout_truncated=bool(resp["stdout_truncated"]),
            stderr_truncated=bool(resp["stderr_truncated"]),
        )

    def _write_files(self, files: dict[str, bytes]) -> None:
        resp = self._call({"op": "write", "files": {p: _b64(c) for p, c in files.items()}})
        if not resp.get("ok"):
            _raise_remote(resp)

    def _read_file(self, path: str, max_bytes: int) -> bytes:
        resp = self._call({"op": "read", "path": path, "max_bytes": max_bytes})
        if not resp.get("ok"):
            _raise_remote(resp, path)
        return base64.b64decode(resp["data"])

    def _list_files(self, path: str) -> list[str]:
        resp = self._call({"op": "list", "path": path})
        if not resp.get("ok"):
            _raise_remote(resp, path)
        return list(resp["files"])

    def _reset(self) -> None:
        with self._lock:
            self._restart()

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                self._stop(conn)
