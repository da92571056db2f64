"""Who may talk to agentgym's servers: the bind address, a bearer token, and browser cross-site checks.

Both servers (``agentgym serve env`` and ``agentgym serve model``) wrap their app in :class:`Guard`,
which refuses a request before any route sees it:

* **Host** (DNS rebinding): the ``Host`` header must name this server: a loopback name
  (``localhost``, ``127.0.0.1``, ``::1``), the bound address, or a name the operator added
  (``--allow-host``). A server bound to every interface (``0.0.0.0``) with a token accepts any
  name: the token is what keeps strangers out. Refused: 403.
* **Origin** (cross-site requests from a web page open in the operator's browser): a request
  that carries an ``Origin`` header is refused unless the operator named that origin
  (``--allow-origin``). Programs (httpx, the OpenAI SDK, websockets) send none. Refused: 403.
* **Content type**: every ``POST`` must be ``application/json`` (a browser's "simple"
  cross-site request can only send ``text/plain``, form or multipart bodies). Refused: 415.
* **Token**: a server bound to anything but ``127.0.0.1``, ``::1`` or ``localhost`` requires ``Authorization: Bearer TOKEN`` on
  every route (compared in constant time). The token comes from the operator
  (``AGENTGYM_SERVE_TOKEN``) or is generated at start and printed once. On loopback a token is
  required only when the operator set one. Refused: 401.

A refused WebSocket handshake gets the same HTTP status and JSON body (the ASGI denial-response
extension), so a client can say why.
"""

from __future__ import annotations

import hmac
import os
import secrets
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentgym.errors import ConfigError
from agentgym.serving.env_wire import TOKEN_ENV

__all__ = ["TOKEN_ENV", "Access", "Guard", "is_loopback", "server_access"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """``host`` is one of the loopback names a server may bind without a token (``LOOPBACK_NAMES``).

    Other addresses of 127.0.0.0/8 are refused too: what counts is what the operator chose to
    bind, and only the usual loopback names are bound without thinking about it."""
    return host.strip("[]").lower() in LOOPBACK_NAMES


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def _host_name(header: str) -> str:
    """``example.org:8000`` -> ``example.org``; ``[::1]:8000`` -> ``::1``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


@dataclass(frozen=True)
class Access:
    """What :class:`Guard` lets in. ``host``: the bound address; ``token``: required when set."""

    host: str = "127.0.0.1"
    token: str | None = None
    hosts: frozenset[str] = frozenset()  # Host names accepted besides loopback and the bound address
    origins: frozenset[str] = frozenset()  # browser origins accepted (none by default)

    def __post_init__(self) -> None:
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(f"a server bound to {self.host!r} (not loopback) needs a token; set {TOKEN_ENV} "
                              "or bind 127.0.0.1")
        if self.token is not None and len(self.token) < 16:
            raise ConfigError(f"the server token must be at least 16 characters, got {len(self.token)}; "
                              f"generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """``(status, message)`` when the request must be refused, else None."""
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is None:
            return 400, "the request has no Host header; send HTTP/1.1 with a Host header"
        name = _host_name(host)
        names = LOOPBACK_NAMES | {self.host.strip("[]").lower()} | self.hosts
        if name not in names and not (self.token is not None and _is_wildcard(self.host)):
            return 403, (f"Host {host!r} is not a name of this server (expected one of {sorted(names)}); "
                         "the operator adds names with --allow-host NAME")
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return 403, (f"cross-site request from Origin {origin!r} refused; this server accepts requests "
                         "from programs, not web pages (the operator allows an origin with --allow-origin)")
        if scope["type"] == "http" and scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                return 415, (f"expected Content-Type: application/json, got {kind or 'none'!r}; send the body "
                             "as JSON")
        if self.token is not None:
            auth = headers.get("authorization", "")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return 401, (f"this server requires a token: send 'Authorization: Bearer TOKEN' (agentgym's "
                             f"clients read it from {TOKEN_ENV}; the server printed it at start)")
        return None


class Guard:
    """ASGI middleware: :meth:`Access.refusal` on every HTTP request and WebSocket handshake."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = self.access.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, message = refused
        kind = {401: "unauthorized", 415: "unsupported_media_type"}.get(status, "forbidden")
        response = JSONResponse({"ok": False, "error": {"type": kind, "message": message}}, status_code=status)
        if scope["type"] == "http":
            await response(scope, receive, send)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await response(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


def server_access(prog: str, host: str, *, hosts: Iterable[str] = (), origins: Iterable[str] = (),
                  say: Callable[[str], Any] | None = None) -> Access:
    """The :class:`Access` of a server started from the command line.

    The token is ``$AGENTGYM_SERVE_TOKEN`` when set; bound to anything but loopback without one,
    a token is generated and printed once (on stderr, so stdout keeps its ready line).
    """
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(32)
        (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
            f"{prog}: bound to {host} (not loopback): every request needs 'Authorization: Bearer TOKEN'; "
            f"agentgym's clients read TOKEN from {TOKEN_ENV} (set it before starting to choose it). "
            f"TOKEN (shown once): {token}")
    return Access(host=host, token=token, hosts=frozenset(h.lower() for h in hosts), origins=frozenset(origins))
