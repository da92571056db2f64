"""Servers for the remote-env tests: ``agentgym serve`` as a real process, or in a thread.

Everything binds 127.0.0.1 with port 0 (a free port); a server process watches the test's pid
and exits if the test process dies.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
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


def start_server(env_id: str, *args: str, port: int = 0, timeout: float = 60.0) -> Served:
    cmd = [sys.executable, "-m", "agentgym.cli", "serve", env_id, "--port", str(port),
           "--parent-pid", str(os.getpid()), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None
    line, deadline = b"", time.monotonic() + timeout
    while not line.endswith(b"\n") and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            chunk = os.read(proc.stdout.fileno(), 512)
            if not chunk:
                break
            line += chunk
    text = line.decode().strip()
    if not text.startswith("AGENTGYM_SERVE_READY"):
        proc.kill()
        raise RuntimeError(f"agentgym serve did not start: {text!r}")
    return Served(url=text.split("url=")[1].split()[0], proc=proc)


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
    from agentgym.remote.server import serve

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
