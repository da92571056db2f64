"""The client with injected I/O: an in-process channel, and HTTP over ``httpx.MockTransport``."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.errors import ConfigError, EnvStateError, ServiceError
from agentgym.oracles import run_oracle
from agentgym.serving import env_wire
from agentgym.serving.env_channels import HTTPChannel, make_channel
from agentgym.serving.env_client import RemoteEnv
from agentgym.serving.env_sessions import Session, SessionManager


class InProcess:
    """A Channel that calls a SessionManager directly, through JSON like the real ones."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager, self.session = manager, None
        self.fail_next: Exception | None = None

    def _json(self, msg: dict[str, Any]) -> dict[str, Any]:
        return json.loads(env_wire.encode(msg))  # type: ignore[no-any-return]

    def open(self, hello: dict[str, Any]) -> dict[str, Any]:
        self.close()  # a Channel ends its previous session first
        self.session = self.manager.open(self._json(hello))
        return {"ok": True, "session": self.session.id, "secret": self.session.secret, "limits": {}}

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.fail_next is not None:
            e, self.fail_next = self.fail_next, None
            raise e
        assert self.session is not None
        return self._json(self.session.handle(self._json(msg)))

    def close(self) -> None:
        if self.session is not None:
            self.manager.close(self.session)
            self.session = None


def test_the_client_mirrors_the_trajectory_and_reads_like_a_local_env() -> None:
    manager = SessionManager("agentgym/MathCalc-v1")
    env = RemoteEnv(url="inproc://", env_id="agentgym/MathCalc-v1", channel=InProcess(manager))
    local = gym.make("agentgym/MathCalc-v1")
    for seed in (0, 5):
        lt = run_oracle(local, seed=seed)
        env.reset(seed=seed)
        for a in lt.actions():
            env.step(np.asarray(a))
        assert env.trajectory is not None and env.trajectory.to_dict() == lt.to_dict()
    assert env.env_id == "agentgym/MathCalc-v1" and env.codec.stop_ids == local.unwrapped.codec.stop_ids
    env.close()
    env.close()  # idempotent
    assert len(manager) == 0
    with pytest.raises(EnvStateError, match="closed"):
        env.reset(seed=0)


def test_a_failed_request_breaks_the_episode_until_reset() -> None:
    channel = InProcess(SessionManager("agentgym/Math-v1"))
    env = RemoteEnv(url="inproc://", env_id="agentgym/Math-v1", channel=channel)
    env.reset(seed=1)
    channel.fail_next = ServiceError("agentgym serve env at inproc:// is gone")
    with pytest.raises(ServiceError, match="gone"):
        env.step(np.array([1, 2]))
    with pytest.raises(EnvStateError, match="episode is lost; call reset"):
        env.step(np.array([1, 2]))
    obs, _ = env.reset(seed=1)  # a fresh session
    assert len(obs) > 0 and env.step(np.array([1, 2]))[4]["turn"] == 1
    env.close()


def test_kwargs_must_be_json_and_urls_must_say_their_transport() -> None:
    with pytest.raises(ConfigError, match="cross the network as JSON"):
        RemoteEnv(url="ws://127.0.0.1:1/ws", env_id="agentgym/Math-v1", transport=object())
    with pytest.raises(ConfigError, match="ws:// or http://"):
        make_channel("tcp://127.0.0.1:1")


def _mock_server(manager: SessionManager, lose_reply_of: set[int]) -> httpx.MockTransport:
    """The HTTP routes over a SessionManager; replies to the seqs in ``lose_reply_of`` are lost
    once after the request was applied (as when a connection drops mid-reply)."""
    sessions: dict[str, Session] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == env_wire.HTTP_PREFIX:
            s = manager.open(json.loads(request.content), "http")
            sessions[s.id] = s
            return httpx.Response(201, json={"ok": True, "session": s.id, "secret": s.secret})
        sid = request.url.path.rsplit("/", 1)[1]
        if request.method == "DELETE":
            manager.close(sessions.pop(sid))
            return httpx.Response(200, json={"ok": True})
        msg = json.loads(request.content)
        reply = sessions[sid].handle(msg)
        if msg.get("seq") in lose_reply_of:
            lose_reply_of.discard(msg["seq"])
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(200, json=reply)

    return httpx.MockTransport(handle)


def test_http_retries_a_lost_reply_without_stepping_twice() -> None:
    manager = SessionManager("agentgym/Math-v1")
    lost = {2, 3}
    channel = HTTPChannel("http://mock", transport=_mock_server(manager, lost), backoff_s=0.0)
    env = RemoteEnv(url="http://mock", env_id="agentgym/Math-v1", channel=channel, max_turns=4)
    env.reset(seed=0)
    env.step(np.array([1, 2, 3]))
    env.step(np.array([4, 5]))
    assert not lost and env.trajectory is not None and len(env.trajectory.turns) == 2
    session = next(iter(manager._sessions.values()))
    assert session.env.unwrapped.trajectory.to_dict() == env.trajectory.to_dict()
    env.close()
    assert len(manager) == 0


def test_http_gives_up_with_a_clear_error_when_nobody_answers() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    channel = HTTPChannel("http://mock", transport=httpx.MockTransport(refuse), reconnect_attempts=2,
                          backoff_s=0.0)
    with pytest.raises(ServiceError, match=r"is gone: connecting failed 3 time\(s\).*agentgym serve env"):
        RemoteEnv(url="http://mock", env_id="agentgym/Math-v1", channel=channel)
