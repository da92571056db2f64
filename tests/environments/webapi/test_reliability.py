"""The service failing under the environment: slow calls, a killed server, a dead parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import httpx
import numpy as np

from agentgym.environments.webapi.launcher import live_servers
from agentgym.environments.webapi.policies import oracle_action, run_episode
from agentgym.environments.webapi.tasks import all_tasks

from .conftest import call, final


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still has a pid: only count it alive if it is not defunct.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_slow_endpoint_hits_the_per_call_timeout_and_the_episode_goes_on() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all", test_endpoints=True, request_timeout=0.5)
    try:
        env.reset(options={"task_id": all_tasks()[0].id})
        assert "sleep" in env.unwrapped._tools
        text, info = call(env, "sleep", seconds=0.05)
        assert "HTTP 200" in text
        t0 = time.monotonic()
        text, info = call(env, "sleep", seconds=3)
        assert time.monotonic() - t0 < 4.0
        assert "timeout" in text and "no answer within 0.5 s" in text and info["tool_result"]["error"] == "timeout"
        t = all_tasks()[0]
        text, _ = call(env, "get_order", **t.plan[0][1])
        assert "HTTP 200" in text
        assert final(env, t.final_text)[0] == 1.0
    finally:
        env.close()


def test_killed_server_is_detected_and_restarted_for_the_next_episode() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all")
    try:
        t = next(t for t in all_tasks() if t.kind == "cancel")
        env.reset(options={"task_id": t.id})
        server = env.unwrapped.server
        old_pid = server.pid
        os.kill(old_pid, signal.SIGKILL)
        server.proc.wait(10)
        # Mid-episode: an infrastructure fault ends the episode; it is not the model's 0.
        _, reward, term, trunc, info = env.step(np.asarray(env.unwrapped.codec.tool_call_ids(
            "get_order", {"order_id": 1}), dtype=np.int64))
        assert "WebAPI server stopped answering" in info["infra_error"] and trunc and not term
        assert env.unwrapped.trajectory.infra_error == info["infra_error"]
        assert env.unwrapped.trajectory.turns[-1].components == {}  # no outcome recorded
        # The next episode gets a fresh server and works end to end.
        reward, _ = run_episode(env, oracle_action, options={"task_id": t.id})
        assert reward == 1.0
        assert server.pid != old_pid and server.alive() and server.restarts >= 1
        assert not _pid_alive(old_pid)
    finally:
        env.close()


def test_the_last_close_stops_the_shared_server() -> None:
    a = gym.make("agentgym/WebAPI-v1")
    b = gym.make("agentgym/WebAPI-v1")
    a.reset(seed=1)
    b.reset(seed=2)
    server = a.unwrapped.server
    assert server is b.unwrapped.server and server in live_servers()
    pid = server.pid
    data_dir = httpx.get(f"{server.url}/_admin/health").json()["storage"]
    assert os.path.isdir(data_dir) and len(os.listdir(data_dir)) == 4  # train and eval templates + two episodes
    a.close()
    assert len(os.listdir(data_dir)) == 3
    assert server.alive()
    run_episode(b, oracle_action, seed=3)
    b.close()
    b.close()  # idempotent
    assert _wait_gone(pid) and server not in live_servers()
    assert not os.path.exists(data_dir)  # the server deleted its databases on the way out


CHILD = """
import sys, time
import gymnasium as gym, agentgym
env = gym.make("agentgym/WebAPI-v1")
env.reset(seed=0)
print(env.unwrapped.server.pid, flush=True)
time.sleep(600)
"""


def test_random_token_actions_never_raise() -> None:
    env = gym.make("agentgym/WebAPI-v1", max_turns=6)
    try:
        env.reset(seed=5)
        rng = np.random.default_rng(0)
        done = False
        while not done:
            action = rng.integers(0, env.unwrapped.tokenizer.vocab_size, size=int(rng.integers(1, 60)))
            _, _, term, trunc, info = env.step(action)
            done = term or trunc
        assert info["counts"]["malformed"] >= 1
    finally:
        env.close()


def test_hung_server_is_restarted_for_the_next_episode() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all", request_timeout=1.0)
    try:
        env.reset(seed=0)
        server = env.unwrapped.server
        old_pid = server.pid
        old_dir = httpx.get(f"{server.url}/_admin/health").json()["storage"]
        os.kill(old_pid, signal.SIGSTOP)  # alive but deaf
        try:
            reward, _ = run_episode(env, oracle_action, options={"task_id": all_tasks()[0].id})
        finally:
            try:
                os.kill(old_pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # already killed by the restart
        assert reward == 1.0 and server.pid != old_pid and server.alive()
        assert _wait_gone(old_pid)
        assert not os.path.exists(old_dir)  # a killed server's databases are deleted by the launcher
    finally:
        env.close()


def test_server_exits_when_its_parent_is_killed_and_leaves_no_files(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the child's temp files land here
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env)
    try:
        server_pid = int(child.stdout.readline())
        assert any(tmp_path.iterdir())  # the episode databases
        assert _pid_alive(server_pid)
        child.kill()  # SIGKILL: no atexit, no close(); only the server's parent watcher can act
        child.wait(10)
        assert _wait_gone(server_pid), "the server outlived its parent"
        assert list(tmp_path.iterdir()) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_server_that_hangs_mid_episode_is_an_infrastructure_fault_not_a_zero() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all", request_timeout=1.0)
    try:
        t = next(t for t in all_tasks() if t.kind == "cancel")
        env.reset(options={"task_id": t.id})
        server = env.unwrapped.server
        old_pid = server.pid
        os.kill(old_pid, signal.SIGSTOP)  # alive but deaf, mid-episode
        try:
            t0 = time.monotonic()
            _, _, term, trunc, info = env.step(np.asarray(env.unwrapped.codec.tool_call_ids(
                "get_order", {"order_id": 1}), dtype=np.int64))
            assert time.monotonic() - t0 < 10  # the call's timeout + one short health check
        finally:
            os.kill(old_pid, signal.SIGCONT)
        assert trunc and not term and "stopped answering" in info["infra_error"]
        reward, _ = run_episode(env, oracle_action, options={"task_id": t.id})  # a healthy server again
        assert reward == 1.0
    finally:
        env.close()
