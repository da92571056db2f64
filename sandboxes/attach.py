"""The Docker attach socket as a runner transport (the container's stdin/stdout)."""

from __future__ import annotations

import socket
import time
from typing import Any

from agentgym.sandboxes.runner_client import RunnerGone

__all__ = ["AttachTransport"]


class AttachTransport:
    """The runner's stdin/stdout through the Docker attach socket.

    With no TTY the engine multiplexes the output: 8-byte headers ``[stream, 0, 0, 0,
    size:u32be]`` then ``size`` bytes; stream 1 is stdout (our responses), 2 is stderr (a
    runner traceback, kept for error messages). Requests are JSON, pure ASCII with control
    characters escaped, so the engine's detach keys (ctrl-p ctrl-q) can never appear.
    """

    def __init__(self, sock: Any) -> None:
        self._holder = sock  # keeps the HTTP response (and so the socket) alive
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._raw = bytearray()
        self._out = bytearray()
        self.stderr = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self._sock.settimeout(30.0)
            self._sock.sendall(data)
        except OSError as exc:
            raise RunnerGone(f"container stdin closed: {exc}") from exc

    def _pump(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunnerGone("runner did not answer in time")
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 20)
        except TimeoutError as exc:
            raise RunnerGone("runner did not answer in time") from exc
        except OSError as exc:
            raise RunnerGone(f"attach socket failed: {exc}") from exc
        if not chunk:
            err = bytes(self.stderr[-500:]).decode("utf-8", "replace")
            raise RunnerGone(f"container exited{': ' + err if err else ''}")
        self._raw += chunk
        while len(self._raw) >= 8:
            size = int.from_bytes(self._raw[4:8], "big")
            if len(self._raw) < 8 + size:
                break
            kind, payload = self._raw[0], bytes(self._raw[8 : 8 + size])
            del self._raw[: 8 + size]
            if kind == 1:
                self._out += payload
            elif len(self.stderr) < 65536:
                self.stderr += payload

    def recv_exact(self, n: int, deadline: float) -> bytes:
        while len(self._out) < n:
            self._pump(deadline)
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def hung_up(self) -> bool:
        """True when the engine has closed the stream (the container exited or the engine
        stopped); a look at the socket that neither waits nor consumes anything."""
        try:
            self._sock.setblocking(False)
            try:
                return self._sock.recv(1, socket.MSG_PEEK) == b""
            finally:
                self._sock.settimeout(30.0)
        except BlockingIOError:
            return False  # open, nothing to read: the runner is waiting for a request
        except OSError:
            return True

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
