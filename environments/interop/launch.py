"""Start a server as a child process on loopback and wait until it answers (OpenEnv servers).

The child prints one line ``... url=http://HOST:PORT`` when its socket is bound; this then polls
``GET {url}/health`` until it answers 200. The child is in its own session and dies with
:meth:`Server.stop` (tests and adapters stop what they start).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

import httpx

from agentgym.errors import ServiceError

__all__ = ["Server", "start_server"]


@dataclass
class Server:
    url: str  # http://HOST:PORT
    proc: subprocess.Popen[bytes]

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def start_server(cmd: list[str], *, timeout: float = 120.0, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> Server:
    log = tempfile.TemporaryFile()  # the child's stderr: quoted when it fails to start, else dropped
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=log,
                            start_new_session=True, cwd=cwd, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while b"url=" not in buf or not buf.endswith(b"\n"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            log.seek(0)
            raise ServiceError(f"{' '.join(cmd)!r} did not print its url within {timeout:.0f} s (stdout "
                               f"{buf.decode(errors='replace')[-300:]!r}, stderr "
                               f"{log.read().decode(errors='replace')[-800:]!r})")
        if select.select([proc.stdout], [], [], 0.2)[0]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            buf += chunk
    line = next(ln for ln in buf.decode(errors="replace").splitlines() if "url=" in ln)
    url = line.split("url=", 1)[1].split()[0]
    server = Server(url, proc)
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if not server.alive:
            break
        time.sleep(0.2)
    server.stop()
    raise ServiceError(f"{' '.join(cmd)!r} printed {url} but /health did not answer within {timeout:.0f} s")
