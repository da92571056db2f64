"""The transport both servers share: the listening socket, uvicorn's settings, bounded request bodies.

* :func:`listen` binds the port before anything slow happens (a model load, an env check), so a
  busy port is one clear line at once (``ConfigError``: ``agentgym`` exits 2), not an error from
  uvicorn after the model was built.
* :func:`uvicorn_config`: uvicorn with its own limits: ``timeout_keep_alive`` for idle
  connections, ``h11_max_incomplete_event_size`` for oversized headers (checked while they arrive), ``ws_max_size`` for
  WebSocket frames, and the h11 protocol of :class:`_HeaderDeadline`, which also closes a
  connection that does not finish its request headers within ``header_timeout_s`` (uvicorn arms
  its keep-alive timer only after a response, so a connection that never completes a request
  would stay open for ever).
* :func:`read_body`: a request body up to ``max_bytes``, within ``timeout_s`` (a client that
  stops half-way through its body is answered 408 instead of holding the request open).
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import anyio
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentgym.errors import ConfigError

__all__ = ["BodyError", "listen", "read_body", "uvicorn_config"]

# A request line and headers still incomplete past this many buffered bytes are refused (400).
# h11 checks it while waiting for more data, so headers that arrive whole in one read (up to the
# transport's read size, 256 KiB) are not measured against it.
MAX_HEADER_BYTES = 16 << 10


def listen(host: str, port: int, *, what: str) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), or a one-line ConfigError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without
    # it every small reply waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        why = "is in use by another process" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
        raise ConfigError(f"{what}: port {port} on {host} {why}; pick another --port, or --port 0 for a "
                          "free one") from None
    sock.listen(2048)
    return sock


class _HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, with the keep-alive timer also armed while a request's headers arrive.

    uvicorn disarms the timer on any data and re-arms it only after a response; here only a
    complete request (uvicorn's own handling of ``h11.Request``) disarms it, so a connection that
    sends nothing, or a partial request line or headers, is closed after ``timeout_keep_alive``.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)  # no disarming here: a complete request disarms the timer
        self.handle_events()


def uvicorn_config(app: Any, *, header_timeout_s: float, max_ws_bytes: int, log_level: str,
                   **kwargs: Any) -> Any:
    """uvicorn's Config for one of agentgym's servers (module doc); ``kwargs`` pass through."""
    import uvicorn

    return uvicorn.Config(app, http=_HeaderDeadline, timeout_keep_alive=max(1, round(header_timeout_s)),
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES, ws_max_size=max_ws_bytes,
                          ws_per_message_deflate=False, log_level=log_level, access_log=False, **kwargs)


class BodyError(ConfigError):
    """A request body that is too large (413) or arrives too slowly (408)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The request body, refusing more than ``max_bytes`` before reading it all, within ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyError(f"request body of {declared} bytes is over this server's limit of {max_bytes}", 413)
    body = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise BodyError(f"request body is over this server's limit of {max_bytes} bytes", 413)
    except TimeoutError:
        raise BodyError(f"the request body did not arrive within {timeout_s:g} s; send it whole", 408) from None
    return bytes(body)
