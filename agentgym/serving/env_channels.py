"""Client side I/O: one request, one reply, over WebSocket or HTTP, surviving dropped connections.

A :class:`Channel` opens a session (``hello``) and then carries requests. When the connection
drops, a channel reconnects (``resume`` over WebSocket; a plain retry over HTTP) with
exponential backoff and sends the same request again: the server answers a repeated ``seq``
from its stored reply, so nothing is applied twice. When the server stays unreachable the
channel raises :class:`ServiceError` saying so; when the session is gone (the server restarted,
or ended it after no request for its idle timeout) it raises :class:`SessionEnded`.

The remote env takes any ``Channel``; unit tests pass one over ``httpx.MockTransport`` or an
in-process function, integration tests the real ones against ``agentgym serve env``.

Exit: a WebSocket connection has a receiving thread. Once the interpreter finalizes, that
thread is frozen, and a polite close (which waits for it) would hang the process for ever.
So every open WebSocket channel is closed by an ``atexit`` hook, which runs before the freeze,
and a close that still happens during finalization (``__del__`` of a client nobody closed)
only shuts the socket.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from agentgym.errors import AgentGymError, ConfigError, EnvStateError, ServiceError, SessionEnded
from agentgym.serving import env_wire

__all__ = ["Channel", "HTTPChannel", "WebSocketChannel", "make_channel"]


class Channel(Protocol):
    def open(self, hello: dict[str, Any]) -> dict[str, Any]:
        """Start a session, ending the previous one if any; returns the server's welcome
        (session id, tokenizer, limits)."""
        ...

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one request of the open session and return its reply (``ok`` true or false)."""
        ...

    def close(self) -> None:
        """End the session and the connection (idempotent; never raises)."""
        ...


class _Retrying:
    """Backoff bookkeeping shared by both channels."""

    def __init__(self, url: str, *, timeout: float, connect_timeout: float, reconnect_attempts: int,
                 backoff_s: float, token: str | None = None) -> None:
        self.url, self.timeout, self.connect_timeout = url, timeout, connect_timeout
        # The server's token (``agentgym.serving.guard``), sent on every request when set.
        self.auth = {"authorization": f"Bearer {token}"} if token else {}
        self.reconnect_attempts, self.backoff_s = reconnect_attempts, backoff_s
        self.session: str | None = None
        self.secret: str | None = None
        self.reconnects = 0  # successful reconnections (for tests and diagnostics)

    def _gone(self, last: BaseException | None, what: str) -> ServiceError:
        tries = self.reconnect_attempts + 1
        return ServiceError(
            f"agentgym serve env at {self.url} is gone: {what} failed {tries} time(s) over "
            f"{self.backoff_s * (2 ** self.reconnect_attempts - 1):.1f} s of backoff (last error: {last!r}). Start the server "
            "again (`agentgym serve env ENV_ID`); the episode in flight is lost, reset() starts a new session")

    def _timed_out(self, op: Any) -> ServiceError:
        return ServiceError(f"no reply from {self.url} within {self.timeout:g} s to {op!r}; the server is "
                            "overloaded or the env call hangs. Raise timeout= if steps are slow; reset() "
                            "before stepping again")


def _handshake_status(e: BaseException) -> int | None:
    """The HTTP status a server answered a WebSocket handshake with, if that is what ``e`` is."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None) or getattr(e, "status_code", None)
    return int(status) if isinstance(status, int) else None


def _refusal(url: str, status: int, body: Any) -> ConfigError | None:
    """The error for a request the server's guard refused (401, 403, 415 with its JSON reason), else None."""
    if status not in (401, 403, 415):
        return None
    try:
        message = str(json.loads(body)["error"]["message"])
    except (TypeError, ValueError, KeyError):
        return None
    return ConfigError(f"{url} refused the connection: {message}")


def _ended(url: str, e: BaseException) -> SessionEnded | None:
    """The error for a connection the server closed because its session had no request for the
    server's idle timeout (close code ``WS_IDLE_CLOSE``, the reason says so), else None."""
    close = getattr(e, "rcvd", None)  # websockets' ConnectionClosed: the close frame received
    if getattr(close, "code", None) != env_wire.WS_IDLE_CLOSE:
        return None
    return SessionEnded(f"{url} ended this session: {getattr(close, 'reason', '') or 'idle too long'}. The "
                        "episode in flight is lost; reset() opens a new session")


_OPEN: weakref.WeakSet[WebSocketChannel] = weakref.WeakSet()  # channels with a live connection
CLOSE_TIMEOUT_S = 2.0  # a polite close waits at most this long for the server's answer


def _close_open_channels() -> None:
    """At exit, before daemon threads freeze: end every session a script left open."""
    for channel in list(_OPEN):
        channel.close()


atexit.register(_close_open_channels)


class WebSocketChannel(_Retrying):
    """One WebSocket connection per session (``ws://host:port/ws``), resumed after a drop.

    ``connect`` is ``websockets.sync.client.connect`` unless injected.
    """

    def __init__(self, url: str, *, timeout: float = 60.0, connect_timeout: float = 10.0,
                 reconnect_attempts: int = 3, backoff_s: float = 0.2, max_message_bytes: int = 64 << 20,
                 token: str | None = None, connect: Callable[..., Any] | None = None) -> None:
        super().__init__(url, timeout=timeout, connect_timeout=connect_timeout,
                         reconnect_attempts=reconnect_attempts, backoff_s=backoff_s, token=token)
        if connect is None:
            try:
                from websockets.sync.client import connect as ws_connect
            except ImportError as e:
                raise ServiceError("WebSocket sessions need the websockets package: "
                                   "pip install 'agentgym-suite[scale]' (or pass an http:// url)") from e
            connect = ws_connect
            if "legacy" in inspect.signature(ws_connect).parameters:  # websockets >= 16: a plain connection
                connect = functools.partial(ws_connect, legacy=True)
        self._connect: Callable[..., Any] = connect
        self.max_message_bytes = max_message_bytes
        self._ws: Any = None

    def _roundtrip(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._ws.send(env_wire.encode(msg))
        return env_wire.decode(self._ws.recv(timeout=self.timeout), max_bytes=self.max_message_bytes)

    def _dial(self, first: dict[str, Any], what: str = "connecting") -> dict[str, Any]:
        """Connect and send the first message; retried while the server cannot be reached."""
        from websockets.exceptions import WebSocketException

        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                self._ws = self._connect(self.url, open_timeout=self.connect_timeout,
                                         max_size=self.max_message_bytes, compression=None,
                                         close_timeout=CLOSE_TIMEOUT_S, additional_headers=self.auth)
                _OPEN.add(self)
                reply = self._roundtrip(first)
            except TimeoutError:
                self._drop()
                raise self._timed_out(first.get("op")) from None
            except (OSError, WebSocketException) as e:
                self._drop()
                status = _handshake_status(e)
                refused = _refusal(self.url, status or 0, getattr(getattr(e, "response", None), "body", b""))
                if refused is not None:  # the server's guard: no retry helps
                    raise refused from None
                if status is not None:  # a server answered, but not with a WebSocket: no retry helps
                    raise ConfigError(
                        f"{self.url} answered the WebSocket handshake with HTTP {status}: the server is up but "
                        f"has no agentgym WebSocket endpoint at that path. `agentgym serve env` listens on "
                        f"ws://HOST:PORT{env_wire.WS_PATH} (its HTTP base is http://HOST:PORT)") from None
                last = e
                continue
            if not reply.get("ok"):
                self._drop()
                raise env_wire.error_from_wire(reply.get("error"), f"{self.url} refused {first.get('op')}")
            return reply
        raise self._gone(last, what)

    def open(self, hello: dict[str, Any]) -> dict[str, Any]:
        self.close()  # a new session ends the previous one (the connection is per session)
        welcome = self._dial(hello)
        self.session, self.secret = welcome["session"], welcome["secret"]
        return welcome

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import WebSocketException

        if self.session is None:
            raise EnvStateError("no open session on this channel; reset() opens one")
        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts + 1):
            try:
                if self._ws is None:
                    if attempt:
                        time.sleep(self.backoff_s * 2 ** (attempt - 1))
                    self._dial({"op": "resume", "protocol": env_wire.PROTOCOL, "session": self.session,
                                "secret": self.secret}, "reconnecting")
                    self.reconnects += 1
                return self._roundtrip(msg)
            except TimeoutError:
                self._drop()
                raise self._timed_out(msg.get("op")) from None
            except (OSError, WebSocketException) as e:
                self._drop()
                ended = _ended(self.url, e)
                if ended is not None:  # closed on purpose: resuming would only be refused
                    self._forget()
                    raise ended from None
                last = e
            except ServiceError:
                self._forget()
                raise
            except AgentGymError as e:  # resume refused: the session is gone
                self._forget()
                raise SessionEnded(f"the session on {self.url} was lost ({e}); the episode in flight is "
                                   "lost, reset() starts a new session") from None
        self._forget()
        raise self._gone(last, "reconnecting")

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        _OPEN.discard(self)
        if ws is None:
            return
        try:
            if sys.is_finalizing():  # the receiving thread is frozen: a handshake would wait for ever
                ws.socket.close()
            else:
                ws.close()
        except Exception:
            pass

    def _forget(self) -> None:
        self._drop()
        self.session = self.secret = None

    def close(self) -> None:
        if self._ws is not None and self.session is not None and not sys.is_finalizing():
            try:
                self._ws.send(env_wire.encode({"op": "close"}))
                self._ws.recv(timeout=min(self.timeout, CLOSE_TIMEOUT_S))
            except Exception:
                pass  # the server closes the session on its own once the connection is gone
        self._forget()


class HTTPChannel(_Retrying):
    """Plain HTTP (``http://host:port``): one POST per request; ``transport`` is injectable."""

    def __init__(self, url: str, *, timeout: float = 60.0, connect_timeout: float = 10.0,
                 reconnect_attempts: int = 3, backoff_s: float = 0.2, token: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url.rstrip("/"), timeout=timeout, connect_timeout=connect_timeout,
                         reconnect_attempts=reconnect_attempts, backoff_s=backoff_s, token=token)
        self._http = httpx.Client(base_url=self.url, transport=transport, headers=self.auth,
                                  timeout=httpx.Timeout(timeout, connect=connect_timeout))

    def _post(self, path: str, msg: dict[str, Any], what: str) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if self.secret:
            headers[env_wire.SECRET_HEADER] = self.secret
        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = self._http.post(path, content=env_wire.encode(msg), headers=headers)
            except httpx.TimeoutException as e:
                if isinstance(e, httpx.ConnectTimeout):
                    last = e
                    continue
                raise self._timed_out(msg.get("op")) from None
            except httpx.TransportError as e:  # refused, reset: the same seq is safe to resend
                last = e
                continue
            refused = _refusal(self.url, r.status_code, r.content)
            if refused is not None:
                raise refused
            try:
                reply = r.json()
            except ValueError:
                raise ServiceError(f"{self.url}{path} answered HTTP {r.status_code} with a non-JSON body "
                                   f"{r.text[:200]!r}; is this an agentgym serve env endpoint?") from None
            if r.status_code == 404 and self.session is not None:
                self.session = self.secret = None
                raise SessionEnded(f"the session on {self.url} was lost "
                                   f"({reply.get('error', {}).get('message', '')}); the episode in flight "
                                   "is lost, reset() starts a new session")
            return reply  # type: ignore[no-any-return]
        raise self._gone(last, what)

    def open(self, hello: dict[str, Any]) -> dict[str, Any]:
        self._end_session()
        reply = self._post(env_wire.HTTP_PREFIX, hello, "connecting")
        if not reply.get("ok"):
            raise env_wire.error_from_wire(reply.get("error"), f"{self.url} refused hello")
        self.session, self.secret = reply["session"], reply["secret"]
        return reply

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.session is None:
            raise EnvStateError("no open session on this channel; reset() opens one")
        return self._post(f"{env_wire.HTTP_PREFIX}/{self.session}", msg, "reconnecting")

    def close(self) -> None:
        self._end_session()
        self._http.close()

    def _end_session(self) -> None:
        if self.session is not None:
            try:
                self._http.delete(f"{env_wire.HTTP_PREFIX}/{self.session}",
                                  headers={env_wire.SECRET_HEADER: str(self.secret)}, timeout=5.0)
            except httpx.HTTPError:
                pass
        self.session = self.secret = None


def make_channel(url: str, **kwargs: Any) -> Channel:
    """The channel for a URL: ``ws://``/``wss://`` -> WebSocket, ``http://``/``https://`` -> HTTP."""
    if url.startswith(("ws://", "wss://")):
        kwargs.pop("transport", None)
        return WebSocketChannel(url, **kwargs)
    if url.startswith(("http://", "https://")):
        return HTTPChannel(url, **kwargs)
    raise ConfigError(f"url must start with ws:// or http://, got {url!r}; `agentgym serve env` prints its "
                      "WebSocket url (ws://HOST:PORT/ws); its HTTP base is http://HOST:PORT")
