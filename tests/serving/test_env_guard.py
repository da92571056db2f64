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


# ------------------------------------------------------------------ sessions per client, idle sessions
CALC = "agentgym/MathCalc-v1"
CALC_HELLO = {**HELLO, "env_id": CALC}


def test_the_per_client_cap_defaults_to_half_the_total_and_follows_max_sessions() -> None:
    from agentgym.serving.cli import _parser, env_limits

    assert env_wire.Limits().max_client_sessions == 128 and env_wire.Limits().max_sessions == 256
    assert env_wire.Limits(max_sessions=1).max_client_sessions == 1
    assert env_wire.Limits(max_sessions=7, max_client_sessions=7).max_client_sessions == 7
    with pytest.raises(ConfigError, match=r"between 1 and max_sessions \(--max-sessions, 4\), got 5"):
        env_wire.Limits(max_sessions=4, max_client_sessions=5)

    def parsed(*flags: str) -> env_wire.Limits:
        return env_limits(_parser().parse_args(["env", MATH, *flags]))

    assert parsed().max_client_sessions == 128
    assert parsed("--max-sessions", "6").max_client_sessions == 3  # only the total given: half of it
    assert parsed("--max-sessions", "6", "--max-client-sessions", "6").max_client_sessions == 6


def test_one_address_is_refused_at_the_default_cap_while_another_still_gets_sessions() -> None:
    limits = env_wire.Limits(max_sessions=4)  # the per-client cap left to its default: 2
    with served(SessionManager(MATH, limits=limits)) as url:
        def client(address: str) -> httpx.Client:
            return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)

        with client("127.0.0.3") as first, client("127.0.0.4") as second:
            def hello(c: httpx.Client) -> httpx.Response:
                return c.post(url + env_wire.HTTP_PREFIX, content=env_wire.encode(HELLO),
                              headers={"content-type": "application/json"})

            assert [hello(first).status_code for _ in range(2)] == [201, 201]
            refused = hello(first)
            assert refused.status_code == 503
            message = refused.json()["error"]["message"]
            assert "client at capacity: 127.0.0.3 holds 2" in message and "--max-client-sessions 2" in message
            assert [hello(second).status_code for _ in range(2)] == [201, 201]  # the other address is not locked out
            assert hello(second).status_code == 503  # the total (4) is reached now


class Tracked:
    """Builds real envs and counts them, built and closed (a closed env released its resources)."""

    def __init__(self, step_gate: threading.Event | None = None) -> None:
        self.built = self.closed = 0
        self.changed = threading.Condition()
        self.step_gate = step_gate  # set: a step whose action starts with b"z" waits for it
        self.stepping = threading.Event()  # such a step has started

    def make(self, env_id: str, **kwargs: Any) -> gym.Env:
        env = gym.make(env_id, **kwargs)
        close, step = env.close, env.unwrapped.step

        def counted_close() -> None:
            close()
            with self.changed:
                self.closed += 1
                self.changed.notify_all()

        def gated_step(action: Any) -> Any:
            if self.step_gate is not None and len(action) and int(action[0]) == ord("z"):
                self.stepping.set()
                assert self.step_gate.wait(60)
            return step(action)

        env.close, env.unwrapped.step = counted_close, gated_step  # type: ignore[method-assign]
        with self.changed:
            self.built += 1
        return env

    def wait_closed(self, n: int, timeout: float = 30.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.closed >= n, timeout)


def _silent_session(ws_url: str) -> Any:
    """A raw WebSocket session that resets once and then says nothing."""
    from agentgym.serving.env_channels import WebSocketChannel

    ws = WebSocketChannel(ws_url)._connect(ws_url, open_timeout=30)
    ws.send(env_wire.encode(CALC_HELLO))
    assert env_wire.decode(ws.recv(timeout=30), max_bytes=1 << 20)["ok"]
    ws.send(env_wire.encode({"op": "reset", "seq": 1, "seed": 0}))
    assert env_wire.decode(ws.recv(timeout=30), max_bytes=1 << 22)["ok"]
    return ws


def test_a_silent_websocket_session_is_closed_with_its_env_and_the_client_told_why() -> None:
    from websockets.exceptions import ConnectionClosed

    from agentgym.errors import SessionEnded

    envs = Tracked()
    manager = SessionManager(CALC, limits=env_wire.Limits(idle_timeout_s=1.0), make_env=envs.make)
    with served(manager) as url:
        ws_url = url.replace("http://", "ws://") + env_wire.WS_PATH
        ws = _silent_session(ws_url)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)  # the server's close frame is the signal
        assert closed.value.rcvd is not None and closed.value.rcvd.code == env_wire.WS_IDLE_CLOSE
        assert closed.value.rcvd.reason == "no request for 1 s; raise --idle-timeout on the server or keep stepping"
        assert (envs.built, envs.closed, len(manager)) == (1, 1, 0)  # closed before the connection was

        env = gym.make("agentgym/Remote-v0", url=ws_url, env_id=CALC)
        env.reset(seed=0)
        assert envs.wait_closed(2)  # silent: the server ends it
        with pytest.raises(SessionEnded, match=r"ended this session: no request for 1 s; raise --idle-timeout "
                                               r"on the server or keep stepping\. The episode in flight is lost"):
            env.step(np.array([1, 2]))
        obs, _ = env.reset(seed=0)  # a new session
        assert len(obs) > 0 and env.step(np.array([1, 2]))[0].size > 0 and envs.built == 3
        assert envs.wait_closed(3)
        obs, _ = env.reset(seed=1)  # a reset after the server ended the session simply opens a new one
        assert len(obs) > 0 and envs.built == 4 and len(manager) == 1
        env.close()
        assert envs.wait_closed(4) and len(manager) == 0


def test_a_websocket_session_that_keeps_stepping_is_kept() -> None:
    envs = Tracked()
    manager = SessionManager(CALC, limits=env_wire.Limits(idle_timeout_s=1.0), make_env=envs.make)
    with served(manager) as url:
        ws_url = url.replace("http://", "ws://") + env_wire.WS_PATH
        env = gym.make("agentgym/Remote-v0", url=ws_url, env_id=CALC)
        env.reset(seed=0)
        session = env.unwrapped.session_id
        silent = _silent_session(ws_url)  # closed once the idle timeout has passed: the clock runs
        t0, steps = time.monotonic(), 0
        while envs.closed == 0 or time.monotonic() - t0 < 3.0:  # three timeouts at least
            assert time.monotonic() - t0 < 60, "the silent session was never closed"
            time.sleep(0.1)  # a step every ~0.1 s: well inside the 1 s timeout
            _, _, terminated, truncated, _ = env.step(np.array([1, 2]))
            steps += 1
            if terminated or truncated:
                env.reset(seed=steps)
        assert env.unwrapped.session_id == session and envs.closed == 1 and len(manager) == 1
        silent.close()
        env.close()


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_a_step_longer_than_the_idle_timeout_is_never_reaped(transport: str) -> None:
    gate = threading.Event()
    envs = Tracked(step_gate=gate)
    manager = SessionManager(CALC, limits=env_wire.Limits(idle_timeout_s=1.0), make_env=envs.make)
    with served(manager) as url:
        ws_url = url.replace("http://", "ws://") + env_wire.WS_PATH
        env = gym.make("agentgym/Remote-v0", url=ws_url if transport == "ws" else url, env_id=CALC, timeout=60)
        env.reset(seed=0)
        result: list[Any] = []
        stepper = threading.Thread(target=lambda: result.append(env.step(np.array([ord("z")]))), daemon=True)
        stepper.start()
        assert envs.stepping.wait(30)
        _silent_session(ws_url)  # opened after the slow step began: once it is closed, a timeout has passed
        assert envs.wait_closed(1)
        gate.set()
        stepper.join(30)
        assert result and result[0][0].size > 0  # the slow step answered
        env.step(np.array([1, 2]))  # and its session goes on
        assert envs.closed == 1 and len(manager) == 1
        env.close()


def test_an_idle_http_session_ends_the_same_way_for_the_client() -> None:
    from agentgym.errors import SessionEnded

    envs = Tracked()
    manager = SessionManager(CALC, limits=env_wire.Limits(idle_timeout_s=1.0), make_env=envs.make)
    with served(manager) as url:
        env = gym.make("agentgym/Remote-v0", url=url, env_id=CALC)
        env.reset(seed=0)
        assert envs.wait_closed(1)  # reaped
        with pytest.raises(SessionEnded, match=r"was lost .*no request for 1 s \(--idle-timeout\)"):
            env.step(np.array([1, 2]))
        assert len(env.reset(seed=0)[0]) > 0 and envs.built == 2  # after the error: a new session
        assert envs.wait_closed(2)
        assert len(env.reset(seed=0)[0]) > 0 and envs.built == 3  # a reset alone: a new session too
        env.close()
