"""``agentgym serve env ENV_ID``: one registered environment served over WebSocket and HTTP.

A Starlette app on uvicorn. Each session holds its own environment instance (``gym.make``);
env calls block (sandboxes, HTTP tools), so they run in worker threads, at most one request at
a time per session and at most ``max_sessions`` sessions per process. The transports:

* ``/ws``: a WebSocket whose first message is ``hello`` (a new session) or ``resume`` (take a
  session back after the connection dropped). When the connection ends without ``close``,
  the session waits ``detach_grace_s`` for a ``resume`` and is then closed. A connection with
  no request for ``idle_timeout_s`` closes its session and then itself (``WS_IDLE_CLOSE``).
* ``/v1/sessions``: the same requests over plain HTTP, one JSON body each; a session closes on
  ``DELETE`` or after ``idle_timeout_s`` without a request.

The messages are in ``env_wire.py``; the session logic (ordering, replay of a resent request, the
cap, which constructor keywords a client may set) in ``env_sessions.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from agentgym.errors import AgentGymError, ConfigError
from agentgym.serving import env_wire
from agentgym.serving.env_sessions import Session, SessionManager
from agentgym.serving.guard import Access, Guard
from agentgym.serving.transport import listen, read_body, uvicorn_config

__all__ = ["create_app", "serve"]

# WebSocket close codes (RFC 6455 / IANA): policy violation, try again later.
WS_POLICY, WS_TRY_LATER = 1008, 1013


def create_app(manager: SessionManager, access: Access | None = None) -> Guard:
    """The app of one served env behind :class:`Guard` (``access``: loopback, no token by default)."""
    limits = manager.limits
    threads = anyio.CapacityLimiter(max(4, limits.max_sessions))

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=threads)

    # ------------------------------------------------------------------ WebSocket
    async def ws_endpoint(ws: WebSocket) -> None:
        await ws.accept()
        try:
            with anyio.fail_after(limits.hello_timeout_s):
                first = await _receive(ws, limits.max_message_bytes)
        except (TimeoutError, WebSocketDisconnect):
            await _close(ws, WS_POLICY)
            return
        except ConfigError as e:
            await ws.send_text(env_wire.encode(env_wire.error_reply(e)))
            await _close(ws, WS_POLICY)
            return
        try:
            session = await _attach(first, client_of(ws))
        except Exception as e:  # a refused hello, or an env that failed to build: the client is told
            await ws.send_text(env_wire.encode(env_wire.error_reply(e)))
            await _close(ws, WS_TRY_LATER if "capacity" in str(e) else WS_POLICY)
            return
        session.attached = True
        session.generation += 1
        generation = session.generation
        try:
            await ws.send_text(env_wire.encode(_welcome(session)))
            while True:
                try:
                    # The idle clock runs only here, between a reply and the next request: a
                    # step that is running is never timed out by it.
                    with anyio.fail_after(limits.idle_timeout_s):
                        msg = await _receive(ws, limits.max_message_bytes)
                except TimeoutError:
                    if session.generation == generation:  # still this connection's session
                        await in_thread(manager.close, session)  # the env (container, schema) released
                    await _close(ws, env_wire.WS_IDLE_CLOSE, env_wire.idle_reason(limits.idle_timeout_s))
                    return
                except ConfigError as e:
                    await ws.send_text(env_wire.encode(env_wire.error_reply(e)))
                    continue
                if msg.get("op") == "close":
                    await in_thread(manager.close, session)
                    await ws.send_text(env_wire.encode({"ok": True}))
                    await _close(ws, 1000)
                    return
                reply = await in_thread(session.handle, msg)
                await ws.send_text(env_wire.encode(reply))
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away; its session waits detach_grace_s for a resume
        finally:
            if session.generation == generation:  # no newer connection took it over
                session.attached = False
                session.touched = time.monotonic()

    async def _attach(first: dict[str, Any], client: str) -> Session:
        op = first.get("op")
        if op == "hello":
            return await in_thread(manager.open, first, "ws", client)  # type: ignore[no-any-return]
        if op == "resume":
            if first.get("protocol") != env_wire.PROTOCOL:
                raise ConfigError(f"protocol {first.get('protocol')!r} is not spoken here ({env_wire.PROTOCOL})")
            return manager.get(str(first.get("session")), str(first.get("secret")))
        raise ConfigError(f"the first message must be 'hello' or 'resume', got op {op!r}")

    # ------------------------------------------------------------------ HTTP
    async def body(request: Request) -> bytes:
        return await read_body(request, limits.max_message_bytes, limits.body_timeout_s)

    async def http_open(request: Request) -> Response:
        try:
            msg = env_wire.decode(await body(request), max_bytes=limits.max_message_bytes)
            if msg.get("op", "hello") != "hello":
                raise ConfigError("POST /v1/sessions opens a session: expected op 'hello'")
            session = await in_thread(manager.open, msg, "http", client_of(request))
        except Exception as e:
            status = getattr(e, "status", 503 if "capacity" in str(e) else 400)
            return JSONResponse(env_wire.error_reply(e), status_code=status)
        return JSONResponse(_welcome(session), status_code=201)

    async def http_request(request: Request) -> Response:
        try:
            session = _session_of(request)
            if request.method == "DELETE":
                await in_thread(manager.close, session)
                return JSONResponse({"ok": True})
            msg = env_wire.decode(await body(request), max_bytes=limits.max_message_bytes)
            if msg.get("op") == "close":
                await in_thread(manager.close, session)
                return JSONResponse({"ok": True})
            reply = await in_thread(session.handle, msg)
        except AgentGymError as e:
            status = getattr(e, "status", 404 if "no session" in str(e) else 400)
            return JSONResponse(env_wire.error_reply(e), status_code=status)
        return JSONResponse(reply)

    def _session_of(request: Request) -> Session:
        return manager.get(request.path_params["sid"], request.headers.get(env_wire.SECRET_HEADER, ""))

    async def health(_: Request) -> Response:
        return JSONResponse(manager.health())

    # ------------------------------------------------------------------ reaper
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        period = max(0.05, min(1.0, limits.detach_grace_s / 4, limits.idle_timeout_s / 4))

        async def reaper() -> None:
            while True:
                await asyncio.sleep(period)
                await in_thread(manager.reap)

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await in_thread(manager.close_all)

    def _welcome(session: Session) -> dict[str, Any]:
        return {"ok": True, "session": session.id, "secret": session.secret, "env_id": manager.env_id,
                "tokenizer": manager.tokenizer_info(), "limits": limits.to_dict(), "protocol": env_wire.PROTOCOL,
                "splits": list(getattr(session.env.unwrapped, "splits", ()))}

    return Guard(Starlette(routes=[
        WebSocketRoute(env_wire.WS_PATH, ws_endpoint),
        Route(env_wire.HTTP_PREFIX, http_open, methods=["POST"]),
        Route(env_wire.HTTP_PREFIX + "/{sid}", http_request, methods=["POST", "DELETE"]),
        Route("/healthz", health, methods=["GET"]),
    ], lifespan=lifespan), access or Access())


async def _receive(ws: WebSocket, max_bytes: int) -> dict[str, Any]:
    frame = await ws.receive()
    if frame["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(frame.get("code", 1000))
    raw: str | bytes = frame.get("text") or frame.get("bytes") or b""
    return env_wire.decode(raw, max_bytes=max_bytes)


async def _close(ws: WebSocket, code: int, reason: str | None = None) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code, reason)


def client_of(conn: Request | WebSocket) -> str:
    """Who a connection comes from, for the per-client session cap: its address."""
    return conn.client.host if conn.client is not None else "unknown"


# ---------------------------------------------------------------------------- process
def serve(manager: SessionManager, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
          parent_pid: int | None = None, ready: Callable[[str], None] | None = None,
          stop: threading.Event | None = None, access: Access | None = None) -> None:
    """Run the server until SIGTERM/SIGINT, ``parent_pid`` dies or ``stop`` is set; blocks.

    ``access``: who is let in (:mod:`agentgym.serving.guard`; default: loopback, no token).

    ``ready(url)`` is called once the socket accepts connections (default: print
    ``AGENTGYM_SERVE_READY url=ws://HOST:PORT/ws pid=PID`` on stdout, for scripts and tests).
    """
    import uvicorn

    access = access or Access(host=host)
    if access.host != host:
        raise ConfigError(f"access is for {access.host!r} but the server binds {host!r}")
    sock = listen(host, port, what="agentgym serve env")
    lim = manager.limits
    # Frames up to twice the limit get a readable error reply from env_wire.decode; larger ones
    # are cut off by the WebSocket implementation itself.
    config = uvicorn_config(create_app(manager, access), header_timeout_s=lim.header_timeout_s,
                            max_ws_bytes=2 * lim.max_message_bytes + 65536, log_level=log_level, lifespan="on",
                            ws_ping_interval=20.0, ws_ping_timeout=20.0, backlog=2048, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    url = f"ws://{shown}:{bound}{env_wire.WS_PATH}"

    def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.005)
        if ready is not None:
            ready(url)
        else:
            sys.stdout.write(f"{env_wire.READY_PREFIX} url={url} pid={os.getpid()}\n")
            sys.stdout.flush()

    done = threading.Event()

    def watch() -> None:  # a crashed parent (a test, a launcher) never leaves a server behind
        while not done.wait(0.1):
            if (parent_pid is not None and os.getppid() != parent_pid) or (stop is not None and stop.is_set()):
                server.should_exit = True
                return

    threading.Thread(target=watch, daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    threading.Thread(target=announce, daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        done.set()
        manager.close_all()
