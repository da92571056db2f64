"""The server's session logic without any I/O: ordering, replay, the cap, kwargs, reaping."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.errors import ConfigError, EnvStateError, ServiceError
from agentgym.serving import env_wire
from agentgym.serving.env_sessions import SessionManager, parse_env_kwarg
from agentgym.tokenizers import ByteTokenizer

TOK = {"name": ByteTokenizer.name, "vocab_size": ByteTokenizer().vocab_size}


def hello(**kwargs: Any) -> dict[str, Any]:
    return {"op": "hello", "protocol": env_wire.PROTOCOL, "env_id": "agentgym/Math-v1", "kwargs": kwargs,
            "tokenizer": TOK}


def test_a_resent_request_is_answered_again_not_applied_twice() -> None:
    m = SessionManager("agentgym/Math-v1")
    s = m.open(hello(max_turns=5))
    assert s.handle({"op": "reset", "seq": 1, "seed": 0})["ok"]
    first = s.handle({"op": "step", "seq": 2, "action": [1, 2, 3]})
    again = s.handle({"op": "step", "seq": 2, "action": [1, 2, 3]})
    assert again is first and len(s.env.unwrapped.trajectory.turns) == 1
    skipped = s.handle({"op": "step", "seq": 9, "action": [1]})
    assert not skipped["ok"] and "expected 3" in skipped["error"]["message"]
    assert s.handle({"op": "step", "seq": 3, "action": [1]})["ok"]
    m.close_all()


def test_env_errors_travel_back_as_their_class() -> None:
    m = SessionManager("agentgym/Math-v1")
    s = m.open(hello())
    r = s.handle({"op": "step", "seq": 1, "action": [1]})  # step before reset: agentgym's own error
    assert not r["ok"] and r["error"]["type"] == "EnvStateError" and "call reset" in r["error"]["message"]
    assert s.handle({"op": "fly", "seq": 2})["error"]["type"] == "ConfigError"
    assert s.handle({"op": "reset", "seq": 3, "seed": "zero"})["error"]["type"] == "ConfigError"
    m.close(s)
    r = s.handle({"op": "reset", "seq": 4, "seed": 0})
    assert r["error"]["type"] == "EnvStateError"
    assert isinstance(env_wire.error_from_wire(r["error"], "x"), EnvStateError)


def test_clients_may_set_only_allowed_kwargs() -> None:
    m = SessionManager("agentgym/Math-v1")
    with pytest.raises(ConfigError, match=r"does not let clients set \['dataset'\].*--allow-kwarg"):
        m.open(hello(dataset="/etc/passwd"))
    with pytest.raises(ConfigError, match=r"MathEnv got unknown keyword argument\(s\) 'bogus'"):
        SessionManager("agentgym/Math-v1", allow_kwargs=frozenset({"bogus"})).open(hello(bogus=1))
    fixed = SessionManager("agentgym/Math-v1", env_kwargs={"max_turns": 2})
    s = fixed.open(hello(max_turns=50))  # the operator's value wins
    assert s.env.unwrapped.max_turns == 2
    fixed.close_all()
    assert parse_env_kwarg('sandbox="docker"') == ("sandbox", "docker")
    assert parse_env_kwarg("max_turns=8") == ("max_turns", 8) and parse_env_kwarg("split=eval") == ("split", "eval")


def test_hello_is_checked() -> None:
    m = SessionManager("agentgym/Math-v1")
    with pytest.raises(ConfigError, match="serves 'agentgym/Math-v1'"):
        m.open({**hello(), "env_id": "agentgym/CodeFix-v1"})
    with pytest.raises(ConfigError, match="protocol"):
        m.open({**hello(), "protocol": 99})
    with pytest.raises(ConfigError, match="tokenizer mismatch"):
        m.open({**hello(), "tokenizer": {"name": "o200k_harmony", "vocab_size": 201088}})


def test_the_session_cap_refuses_the_next_one() -> None:
    m = SessionManager("agentgym/Math-v1", limits=env_wire.Limits(max_sessions=2, max_client_sessions=2))
    a, _ = m.open(hello()), m.open(hello())
    with pytest.raises(ServiceError, match="capacity: 2 sessions"):
        m.open(hello())
    m.close(a)
    m.open(hello())  # room again
    assert len(m) == 2
    m.close_all()


def test_sessions_of_vanished_clients_are_reaped_and_their_envs_closed() -> None:
    m = SessionManager("agentgym/Math-v1", limits=env_wire.Limits(detach_grace_s=1.0, idle_timeout_s=10.0))
    ws_gone, ws_live, http = m.open(hello(), "ws"), m.open(hello(), "ws"), m.open(hello(), "http")
    ws_live.attached = True
    now = time.monotonic()
    assert m.reap(now) == []
    assert m.reap(now + 2.0) == [ws_gone] and ws_gone.closed
    assert ws_gone.env.unwrapped._state.value == "closed"
    assert m.reap(now + 11.0) == [http]
    assert len(m) == 1  # the attached one stays
    with pytest.raises(EnvStateError, match="no session"):
        m.get(ws_gone.id, ws_gone.secret)
    with pytest.raises(EnvStateError):
        m.get(ws_live.id, "wrong secret")
    m.close_all()


def test_messages_are_bounded_and_must_be_objects() -> None:
    with pytest.raises(ConfigError, match="over this server's limit of 10"):
        env_wire.decode('{"op": "step", "action": [1, 2, 3]}', max_bytes=10)
    with pytest.raises(ConfigError, match="JSON object"):
        env_wire.decode("[1, 2]", max_bytes=100)
    with pytest.raises(ConfigError, match="unparseable"):
        env_wire.decode("{nope", max_bytes=100)


@pytest.mark.parametrize("action", [np.array([1, 2, 3]), [4, 5], np.array([[1, 2]]), np.array([1.5]),
                                    np.array([], dtype=np.int64), np.array([True]), "text", [[1], [2, 3]],
                                    np.array([10**6])])
def test_actions_cross_the_wire_as_the_env_would_see_them(action: Any) -> None:
    import gymnasium as gym

    from agentgym.errors import ActionTypeError

    env = gym.make("agentgym/Math-v1", max_turns=3)
    env.reset(seed=0)
    crossing = env_wire.decode_action(env_wire.decode(env_wire.encode({"a": env_wire.encode_action(action)}), max_bytes=1 << 20)["a"])
    try:
        direct = env.unwrapped._validate(action)
    except ActionTypeError:  # a program's wrong type raises on the server side too
        with pytest.raises(ActionTypeError):
            env.unwrapped._validate(crossing)
    else:
        crossed = env.unwrapped._validate(crossing)
        assert crossed[1] == direct[1] and crossed[0] == direct[0]
    env.close()
