"""``agentgym serve env`` lets in only who it should, and bounds what one request can cost.

Servers bind loopback: 127.0.0.1 (no token needed) or 127.0.0.2, which counts as "elsewhere"
(a token is required), so the non-loopback rules are tested without leaving the machine.
"""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.errors import ConfigError, ServiceError
from agentgym.serving import env_wire
from agentgym.serving.env_sessions import SessionManager
from agentgym.serving.guard import Access, server_access
from agentgym.tokenizers import ByteTokenizer

MATH = "agentgym/Math-v1"
TOKEN = "t0ken-for-the-tests-0123456789"
HELLO = {"op": "hello", "protocol": env_wire.PROTOCOL, "env_id": MATH, "kwargs": {},
         "tokenizer": {"name": ByteTokenizer.name, "vocab_size": ByteTokenizer().vocab_size}}


@contextmanager
def served(manager: SessionManager, host: str = "127.0.0.1", access: Access | None = None) -> Iterator[str]:
    """``serve(manager)`` on a thread; yields its http:// base URL."""
    pytest.importorskip("websockets", reason="WebSocket sessions need the [scale] extra")
    from agentgym.serving.env_server import serve

    urls: list[str] = []
    got, stop = threading.Event(), threading.Event()
    t = threading.Thread(target=serve, args=(manager,), daemon=True,
                         kwargs={"host": host, "ready": lambda u: (urls.append(u), got.set()), "stop": stop,
                                 "access": access})
    t.start()
    try:
        assert got.wait(60), "server thread did not start"
        yield urls[0].removesuffix(env_wire.WS_PATH).replace("ws://", "http://", 1)
    finally:
        stop.set()
        t.join(15)


def post(url: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(url + env_wire.HTTP_PREFIX, content=env_wire.encode(body),
                      headers={"content-type": "application/json", **headers}, timeout=30)


def test_cross_site_requests_are_refused_on_loopback() -> None:
    import websockets.sync.client as wsc
    from websockets.exceptions import InvalidStatus

    with served(SessionManager(MATH)) as url:
        assert post(url, HELLO).status_code == 201  # a program on this machine: let in
        r = post(url, HELLO, host="attacker.example")  # DNS rebinding: a foreign name for 127.0.0.1
        assert r.status_code == 403 and "--allow-host" in r.json()["error"]["message"]
        r = post(url, HELLO, origin="https://attacker.example")  # a web page's fetch()
        assert r.status_code == 403 and "cross-site" in r.json()["error"]["message"]
        r = httpx.post(url + env_wire.HTTP_PREFIX, content=env_wire.encode(HELLO),
                       headers={"content-type": "text/plain"}, timeout=30)  # a "simple" cross-site POST
        assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
        assert httpx.get(url + "/healthz", headers={"host": "attacker.example"}, timeout=30).status_code == 403
        with pytest.raises(InvalidStatus) as refused:
            wsc.connect(url.replace("http://", "ws://") + env_wire.WS_PATH, origin="https://attacker.example",
                        open_timeout=30)
        assert refused.value.response.status_code == 403
        with wsc.connect(url.replace("http://", "ws://") + env_wire.WS_PATH, open_timeout=30) as ws:
            ws.send(env_wire.encode(HELLO))
            assert env_wire.decode(ws.recv(timeout=30), max_bytes=1 << 20)["ok"]


def test_an_allowed_host_and_origin_are_let_in() -> None:
    access = Access(hosts=frozenset({"gym.lab.example"}), origins=frozenset({"https://lab.example"}))
    with served(SessionManager(MATH), access=access) as url:
        assert post(url, HELLO, host="gym.lab.example", origin="https://lab.example").status_code == 201
        assert post(url, HELLO, host="gym.lab.example", origin="https://other.example").status_code == 403


def test_off_loopback_every_route_needs_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    with served(SessionManager(MATH), host="127.0.0.2", access=Access("127.0.0.2", token=TOKEN)) as url:
        for path in ("/healthz",):
            assert httpx.get(url + path, timeout=30).status_code == 401
            assert httpx.get(url + path, headers={"authorization": "Bearer wrong"}, timeout=30).status_code == 401
            assert httpx.get(url + path, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30).status_code == 200
        assert post(url, HELLO).status_code == 401
        assert post(url, HELLO, authorization=f"Bearer {TOKEN}").status_code == 201
        ws_url = url.replace("http://", "ws://") + env_wire.WS_PATH
        for u in (ws_url, url):  # the client says what is missing, over both transports
            monkeypatch.delenv(env_wire.TOKEN_ENV, raising=False)
            with pytest.raises(ConfigError, match=f"requires a token.*{env_wire.TOKEN_ENV}"):
                gym.make("agentgym/Remote-v0", url=u, env_id=MATH, reconnect_attempts=0)
            monkeypatch.setenv(env_wire.TOKEN_ENV, TOKEN)
            env = gym.make("agentgym/Remote-v0", url=u, env_id=MATH)
            obs, _ = env.reset(seed=0)
            assert len(obs) > 0 and env.step(np.array([1, 2, 3]))[0].size > 0
            env.close()


def test_a_server_off_loopback_never_runs_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="needs a token"):
        Access("0.0.0.0")
    with pytest.raises(ConfigError, match="at least 16"):
        Access("127.0.0.1", token="short")
    monkeypatch.delenv(env_wire.TOKEN_ENV, raising=False)
    said: list[str] = []
    made = server_access("agentgym serve env", "0.0.0.0", say=said.append)
    assert made.token and len(said) == 1 and made.token in said[0]  # generated, shown once
    monkeypatch.setenv(env_wire.TOKEN_ENV, TOKEN)
    assert server_access("x", "0.0.0.0", say=said.append).token == TOKEN and len(said) == 1
    assert server_access("x", "127.0.0.1").token == TOKEN  # the operator's token counts on loopback too
    monkeypatch.delenv(env_wire.TOKEN_ENV)
    assert server_access("x", "127.0.0.1").token is None


@pytest.mark.parametrize("action", [
    {"dtype": "<U100000000", "shape": [1], "data": ["a"]},  # 400 MB for one element
    {"dtype": "<U100", "shape": [10**9], "data": []},
    {"dtype": "<U100000", "shape": [], "data": ["a"] * 100},  # 100 values of 400 KB each
    {"dtype": "<i8", "shape": [1000, 1000], "data": [[1] * 1000] * 1000},
    {"dtype": "|O", "shape": [1], "data": [1]},
    {"dtype": "[('a', '<i4')]", "shape": [1], "data": [1]},
    {"dtype": "<f8", "shape": [-1], "data": [1.0]},
])
def test_an_action_that_would_allocate_too_much_is_a_bad_action_not_an_allocation(action: dict[str, Any]) -> None:
    tracemalloc.start()
    try:
        out = env_wire.decode_action(action)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out == [[0], [0, 0]] and peak < 32 << 20  # the input itself is ~8 MB for the 10^6 case


def test_the_actions_the_wire_carries_still_cross() -> None:
    for a in (np.array([[1, 2]]), np.array([1.5]), np.array([True]), np.array("text"), np.array([[1]], np.uint8),
              np.array("x" * 5000)):
        back = env_wire.decode_action(env_wire.encode_action(a))
        assert back.dtype == a.dtype and back.tolist() == a.tolist()


def test_deep_json_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="nested too deeply"):
        env_wire.decode("[" * 100_000 + "]" * 100_000, max_bytes=1 << 20)


def test_sessions_per_client_are_capped() -> None:
    m = SessionManager(MATH, limits=env_wire.Limits(max_sessions=4, max_client_sessions=2))
    m.open(HELLO, "ws", "127.0.0.3")
    m.open(HELLO, "http", "127.0.0.3")
    with pytest.raises(ServiceError, match="client at capacity: 127.0.0.3 holds 2"):
        m.open(HELLO, "ws", "127.0.0.3")
    m.open(HELLO, "ws", "127.0.0.4")  # another client still gets one
    m.close_all()


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection or ``seconds`` pass: (closed, what came back)."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        return False, got
    return True, got


def test_idle_slow_header_and_slow_body_connections_are_closed() -> None:
    limits = env_wire.Limits(header_timeout_s=1.0, body_timeout_s=1.0)
    with served(SessionManager(MATH, limits=limits)) as url:
        port = int(url.rsplit(":", 1)[1])
        idle = socket.create_connection(("127.0.0.1", port))
        partial_header = socket.create_connection(("127.0.0.1", port))
        partial_header.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        partial_body = socket.create_connection(("127.0.0.1", port))
        partial_body.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n{\"op\":")
        t0 = time.monotonic()
        for sock in (idle, partial_header):
            closed, got = _closed_within(sock, 30)
            assert closed and got == b""
            sock.close()
        closed, got = _closed_within(partial_body, 30)
        partial_body.close()
        assert b"408" in got.split(b"\r\n", 1)[0] and b"did not arrive within 1 s" in got
        assert time.monotonic() - t0 < 30
        assert post(url, HELLO).status_code == 201  # the server itself is fine


def test_oversized_request_headers_are_refused() -> None:
    with served(SessionManager(MATH)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
                closed, got = _closed_within(sock, 30)
            except ConnectionResetError:  # the server answered 400 and closed with our bytes unread
                closed, got = True, b"HTTP/1.1 400"
        assert closed and got.startswith(b"HTTP/1.1 400")
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200


def test_the_command_bound_off_loopback_prints_a_token_once_and_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    monkeypatch.delenv(env_wire.TOKEN_ENV, raising=False)
    p = subprocess.Popen([sys.executable, "-m", "agentgym.cli", "serve", "env", MATH, "--host", "127.0.0.2",
                          "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        assert p.stdout is not None and p.stderr is not None
        said = p.stderr.readline()  # the token comes first, on stderr; then the ready line on stdout
        ready = p.stdout.readline()
        assert env_wire.READY_PREFIX in ready and "ws://127.0.0.2:" in ready, (ready, said)
        token = said.rsplit("(shown once): ", 1)[1].strip()
        url = ready.split("url=", 1)[1].split()[0]
        with pytest.raises(ConfigError, match="requires a token"):
            gym.make("agentgym/Remote-v0", url=url, env_id=MATH, reconnect_attempts=0)
        monkeypatch.setenv(env_wire.TOKEN_ENV, token)
        env = gym.make("agentgym/Remote-v0", url=url, env_id=MATH)
        assert len(env.reset(seed=0)[0]) > 0
        env.close()
    finally:
        p.terminate()
        p.wait(30)
    assert token not in p.stderr.read()  # shown once
