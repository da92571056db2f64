"""Real servers, real failures: a killed server, a dropped connection, a vanished client,
a full server, oversized and silent clients, a step slower than the client's timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.errors import ConfigError, EnvStateError, ServiceError
from agentgym.serving import env_wire
from agentgym.serving.env_sessions import SessionManager

pytestmark = pytest.mark.scale  # WebSocket sessions: the [scale] extra (must run in CI)
MATH = "agentgym/Math-v1"


def _remote(url: str, **kw: Any) -> gym.Env:
    kw.setdefault("backoff_s", 0.05)
    return gym.make("agentgym/Remote-v0", url=url, env_id=MATH, **kw)


def _wait(cond: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_a_killed_server_gives_a_clear_error_and_a_restarted_one_a_new_session(serve_process) -> None:
    server = serve_process(MATH)
    env = _remote(server.url, reconnect_attempts=2)
    env.reset(seed=0)
    server.kill()
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match=r"is gone: reconnecting failed 3 time\(s\).*episode in flight is lost"):
        env.step(np.array([1, 2, 3]))
    assert time.monotonic() - t0 < 10  # bounded: attempts x backoff, no hang
    with pytest.raises(EnvStateError, match="call reset"):
        env.step(np.array([1, 2, 3]))
    with pytest.raises(ServiceError, match="gone"):
        env.reset(seed=0)  # still down
    restarted = serve_process(MATH, port=server.port)
    obs, _ = env.reset(seed=0)  # reconnects with a new session
    local_obs, _ = gym.make(MATH).reset(seed=0)
    assert obs.tolist() == local_obs.tolist() and restarted.health()["sessions"] == 1
    env.close()


def test_a_dropped_connection_resumes_and_the_lost_reply_is_not_applied_twice(serve_process) -> None:
    server = serve_process(MATH)
    env = _remote(server.url)
    local = gym.make(MATH)
    local.reset(seed=4)
    env.reset(seed=4)
    inner = env.unwrapped
    # Send step 2 by hand and cut the connection before reading its reply: the server applied it.
    inner.channel._ws.send(env_wire.encode({"op": "step", "seq": inner._seq + 1, "action": [104, 105]}))
    time.sleep(1.0)
    inner.channel._ws.socket.shutdown(2)
    obs, reward, *_ = env.step(np.array([104, 105]))  # resent after a resume: answered from the stored reply
    lobs, lreward, *_ = local.step(np.array([104, 105]))
    assert inner.channel.reconnects == 1
    assert obs.tolist() == lobs.tolist() and reward == lreward
    assert inner.trajectory.to_dict() == local.unwrapped.trajectory.to_dict()  # one turn, not two
    env.close()


def test_sessions_of_a_killed_client_are_closed_after_the_grace(serve_process) -> None:
    server = serve_process(MATH, "--detach-grace", "0.5")
    code = ("import gymnasium as gym, agentgym, os, signal, sys; "
            f"e = gym.make('agentgym/Remote-v0', url='{server.url}', env_id='{MATH}'); e.reset(seed=0); "
            "print('open', flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and b"open" in proc.stdout
    assert _wait(lambda: server.health()["sessions"] == 0)
    assert server.health()["created"] == 1


def test_a_full_server_refuses_with_a_capacity_error(serve_process) -> None:
    server = serve_process(MATH, "--max-sessions", "2", "--max-client-sessions", "2")
    a, b = _remote(server.url), _remote(server.http_url)
    with pytest.raises(ServiceError, match="capacity: 2 sessions"):
        _remote(server.url)
    with pytest.raises(ServiceError, match="capacity"):
        _remote(server.http_url)
    a.close()
    c = _remote(server.url)  # a closed session frees its slot at once
    b.close()
    c.close()


def test_oversized_messages_and_refused_kwargs_are_clear_errors(serve_process) -> None:
    server = serve_process(MATH, "--max-message-bytes", "4000")
    env = _remote(server.url)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="over this server's limit of 4000"):
        env.step(np.full(3000, 65, dtype=np.int64))
    obs, *_ = env.step(np.array([1, 2]))  # the connection and the episode go on
    assert env.unwrapped.trajectory.turns[-1].action_end - env.unwrapped.trajectory.turns[-1].action_start == 2
    env.close()
    with pytest.raises(ConfigError, match=r"does not let clients set \['sandbox'\]"):
        gym.make("agentgym/Remote-v0", url=server.url, env_id=MATH, sandbox="unsafe-local")
    with pytest.raises(ConfigError, match="tokenizer mismatch"):
        from agentgym.tokenizers import ByteTokenizer

        class Other(ByteTokenizer):
            name = "someone-elses-v1"

        gym.make("agentgym/Remote-v0", url=server.url, env_id=MATH, tokenizer=Other())


class SlowEnv:
    """Math-v1 whose step sleeps when the action starts with the byte 'z'."""

    @staticmethod
    def make(env_id: str, **kwargs: Any) -> gym.Env:
        env = gym.make(MATH, **kwargs)
        inner = env.unwrapped
        original = inner.step

        def step(action: Any) -> Any:
            if len(action) and int(action[0]) == ord("z"):
                time.sleep(1.5)
            return original(action)

        inner.step = step
        return env


def test_a_slow_step_times_out_and_a_silent_client_is_dropped(serve_thread) -> None:
    manager = SessionManager(MATH, limits=env_wire.Limits(hello_timeout_s=0.5, detach_grace_s=0.5),
                             make_env=SlowEnv.make)
    server = serve_thread(manager)
    env = _remote(server.url, timeout=0.5)
    env.reset(seed=0)
    with pytest.raises(ServiceError, match="no reply .* within 0.5 s"):
        env.step(np.array([ord("z")]))
    with pytest.raises(EnvStateError, match="call reset"):
        env.step(np.array([1]))
    env.unwrapped.channel.timeout = 10.0
    obs, _ = env.reset(seed=0)  # waits for the slow step to finish, then a clean episode
    assert len(obs) and env.unwrapped.trajectory.turns == []
    env.close()
    from agentgym.serving.env_channels import WebSocketChannel

    ws = WebSocketChannel(server.url)._connect(server.url)  # a raw connection that never says hello
    with pytest.raises(Exception):  # noqa: B017  (closed by the server: the error class varies by version)
        ws.recv(timeout=5)
    assert ws.close_code == 1008
    assert _wait(lambda: len(manager) == 0, 5)  # the timed-out session too, after the grace


def test_import_agentgym_imports_neither_the_server_nor_ray() -> None:
    code = ("import sys, agentgym, gymnasium as gym; "
            "bad = [m for m in ('ray', 'uvicorn', 'starlette', 'websockets', 'agentgym.serving.env_server', "
            "'agentgym.serving.env_client') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ""})
    assert out.stdout.strip() == "[]", out.stderr
    code = ("import sys, gymnasium as gym, agentgym; "
            "from agentgym.serving import env_client; print([m for m in ('agentgym.serving.env_server', "
            "'agentgym.serving.env_sessions', 'uvicorn', 'starlette') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr  # the client never imports the server


def test_a_url_without_the_ws_path_is_named_not_called_gone(serve_process) -> None:
    server = serve_process(MATH)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"answered the WebSocket handshake with HTTP 403: the server is up but has "
                                          r"no agentgym WebSocket endpoint.*ws://HOST:PORT/ws"):
        _remote(server.url.removesuffix("/ws"))
    assert time.monotonic() - t0 < 2  # no retries: a server that answers is not gone


def test_a_killed_server_mid_episode_is_an_infrastructure_fault(serve_process) -> None:
    from agentgym.errors import InfraError

    server = serve_process(MATH)
    env = _remote(server.url, reconnect_attempts=1)
    env.reset(seed=0)
    server.kill()
    with pytest.raises(InfraError) as e:
        env.step(np.array([1, 2, 3]))
    assert isinstance(e.value, ServiceError)  # still the ServiceError it always was
    env.close()


def test_run_oracle_on_a_remote_env_says_where_the_oracle_can_run(serve_process) -> None:
    from agentgym.oracles import run_oracle

    server = serve_process(MATH)
    env = _remote(server.url)
    with pytest.raises(ConfigError, match=r"keeps on its server.*run_oracle\(gym.make\('agentgym/Math-v1'\)\)"):
        run_oracle(env, seed=0)
    env.close()
