"""A script that uses Remote-v0 over WebSocket exits promptly, however it ends.

The WebSocket connection has a receiving thread; a close left to interpreter shutdown used to
wait for that (frozen) thread for ever. These run real scripts against a real server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.scale  # WebSocket sessions: the [scale] extra (must run in CI)

SCRIPT = textwrap.dedent("""
    import sys, time
    import gymnasium as gym
    import agentgym
    env = gym.make("agentgym/Remote-v0", url=sys.argv[1], env_id="agentgym/Math-v1")
    obs, info = env.reset(seed=0)
    print("LAST LINE", flush=True)
    if sys.argv[2] == "raise":
        raise RuntimeError("an uncaught error")
    if sys.argv[2] == "wait":
        time.sleep(600)
    # "end": fall off the end without env.close()
""")


def _run_until_exit(url: str, mode: str, *, interrupt: bool = False) -> tuple[int, float, str]:
    """Run SCRIPT; returns (exit code, seconds from its last line to its exit, stderr)."""
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, url, mode], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        t0 = time.monotonic()
        assert line.strip() == "LAST LINE", (line, p.stderr.read() if p.stderr else "")
        if interrupt:
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=30)
        return rc, time.monotonic() - t0, p.stderr.read() if p.stderr else ""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("mode", ["end", "raise"])
def test_a_script_that_never_closes_the_env_exits_within_2_s(serve_process, mode: str) -> None:
    server = serve_process("agentgym/Math-v1")
    rc, seconds, err = _run_until_exit(server.url, mode)
    assert rc == (0 if mode == "end" else 1), err
    assert seconds < 2.0, f"exit took {seconds:.1f} s after the script's last line"
    if mode == "raise":
        assert "an uncaught error" in err
    # the server ended the script's session (closed at exit, not left for the grace period)
    deadline = time.monotonic() + 5
    while server.health()["sessions"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.health()["sessions"] == 0


def test_ctrl_c_stops_a_script_holding_a_websocket_session(serve_process) -> None:
    server = serve_process("agentgym/Math-v1")
    rc, seconds, err = _run_until_exit(server.url, "wait", interrupt=True)
    assert rc != 0 and "KeyboardInterrupt" in err
    assert seconds < 3.0


def test_the_server_itself_stops_on_one_ctrl_c(serve_process) -> None:
    server = serve_process("agentgym/Math-v1")
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(timeout=10) is not None
