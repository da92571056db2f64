"""Servers for the remote-env tests: ``agentgym serve env`` as a real process, or in a thread.

Everything binds 127.0.0.1 with port 0 (a free port); a server process watches the test's pid
and exits if the test process dies.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest


@dataclass
class Served:
    url: str  # ws://127.0.0.1:PORT/ws
    proc: subprocess.Popen[bytes] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> dict[str, Any]:
        return httpx.get(self.http_url + "/healthz", timeout=5).json()  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.stop.set()


def start_server(env_id: str, *args: str, port: int = 0) -> Served:
    from agentgym.serving.env_launch import launch

    s = launch(env_id, *args, port=port)
    return Served(url=s.url, proc=s.proc)


@pytest.fixture
def serve_process() -> Iterator[Callable[..., Served]]:
    pytest.importorskip("websockets", reason="WebSocket sessions need the [scale] extra")
    started: list[Served] = []

    def _start(env_id: str, *args: str, port: int = 0) -> Served:
        s = start_server(env_id, *args, port=port)
        started.append(s)
        return s

    yield _start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.proc.terminate()
            try:
                s.proc.wait(15)
            except subprocess.TimeoutExpired:
                s.kill()


@pytest.fixture
def serve_thread() -> Iterator[Callable[..., Served]]:
    """``serve(manager)`` on a thread of the test process (for envs registered only here)."""
    pytest.importorskip("websockets", reason="WebSocket sessions need the [scale] extra")
    from agentgym.serving.env_server import serve

    started: list[tuple[Served, threading.Thread]] = []

    def _start(manager: Any) -> Served:
        ready: list[str] = []
        got = threading.Event()
        stop = threading.Event()

        def on_ready(url: str) -> None:
            ready.append(url)
            got.set()

        t = threading.Thread(target=serve, args=(manager,), kwargs={"ready": on_ready, "stop": stop},
                             daemon=True)
        t.start()
        assert got.wait(30), "server thread did not start"
        s = Served(url=ready[0], stop=stop)
        started.append((s, t))
        return s

    yield _start
    for s, t in started:
        s.stop.set()
        t.join(15)
