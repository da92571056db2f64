"""``agentgym serve env`` refuses to start, with one line and before its ready line, when it could
not serve: no WebSocket library, or an env whose infrastructure is down."""

from __future__ import annotations

import os
import subprocess
import sys

from agentgym.serving.env_wire import READY_PREFIX

RUN_CLI = "import runpy, sys; sys.argv = ['agentgym', *sys.argv[1:]]; runpy.run_module('agentgym.cli', run_name='__main__')"


def _serve(*args: str, pre: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", pre + RUN_CLI, "serve", "env", *args, "--port", "0"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
                          stdin=subprocess.DEVNULL)


def test_without_the_websocket_library_it_says_which_extra_to_install() -> None:
    p = _serve("agentgym/Math-v1", pre="import sys; sys.modules['websockets'] = None; ")
    assert p.returncode == 2 and READY_PREFIX not in p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'agentgym-suite[scale]'" in lines[0], p.stderr


def test_codefix_without_docker_never_announces_ready() -> None:
    p = _serve("agentgym/CodeFix-v1", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert p.returncode == 1 and READY_PREFIX not in p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "expected a running Docker engine" in lines[0], p.stderr
