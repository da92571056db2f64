"""Start ``agentgym serve env`` as a child process and wait until it accepts connections.

Used by tests, benchmarks and scripts that need an env server on this machine. The server is
launched by command line (``python -m agentgym.cli serve env``): nothing here imports it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from agentgym.errors import ServiceError
from agentgym.serving.env_wire import READY_PREFIX

__all__ = ["Launched", "launch"]


@dataclass
class Launched:
    url: str  # ws://HOST:PORT/ws
    proc: subprocess.Popen[bytes]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    @property
    def http_url(self) -> str:
        return self.url.removesuffix("/ws").replace("ws://", "http://", 1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


def launch(env_id: str, *args: str, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0,
           watch_parent: bool = True) -> Launched:
    """``agentgym serve env ENV_ID --host HOST --port PORT ARGS...``; returns once it is ready.

    With ``watch_parent`` the server exits when this process dies (no orphaned servers).
    """
    cmd = [sys.executable, "-m", "agentgym.cli", "serve", "env", env_id, "--host", host, "--port", str(port), *args]
    if watch_parent:
        cmd += ["--parent-pid", str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None
    line, deadline = b"", time.monotonic() + timeout
    while not line.endswith(b"\n") and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            chunk = os.read(proc.stdout.fileno(), 512)
            if not chunk:
                break
            line += chunk
    text = line.decode(errors="replace").strip()
    if not text.startswith(READY_PREFIX):
        proc.kill()
        proc.wait()
        raise ServiceError(f"`agentgym serve env {env_id}` did not start within {timeout:.0f} s (expected a "
                           f"'{READY_PREFIX}' line, got {text!r}); run the command by hand to see why")
    return Launched(url=text.split("url=", 1)[1].split()[0], proc=proc)
