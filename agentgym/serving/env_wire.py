"""Wire types shared by ``agentgym serve env`` and the ``agentgym/Remote-v0`` client.

The only module both sides import (the client never imports the server). Every message is one
JSON object; over WebSocket one text frame per message, over HTTP one request body per message.

Handshake (the first message of a WebSocket connection, or ``POST /v1/sessions``)::

    {"op": "hello", "protocol": 1, "env_id": "agentgym/Math-v1", "kwargs": {...},
     "tokenizer": {"name": "agentgym-byte-v1", "vocab_size": 264}}
    {"op": "resume", "protocol": 1, "session": "<id>", "secret": "<secret>"}   # WebSocket only
 -> {"ok": true, "session": "<id>", "secret": "<secret>", "env_id": ..., "tokenizer": {...},
     "limits": {...}, "splits": ["train", "eval"]}   # the served env's splits

Requests (``seq`` counts up from 1 per session; a request repeated with the last ``seq`` gets
the stored reply again, so a request resent after a reconnect is never applied twice)::

    {"op": "reset", "seq": n, "seed": int | null, "options": {...}}
 -> {"ok": true, "seq": n, "obs": [ids], "info": {...}, "trajectory": {Trajectory.to_dict()}}
    {"op": "step", "seq": n, "action": Action}
 -> {"ok": true, "seq": n, "obs": [ids], "reward": float, "terminated": bool, "truncated": bool,
     "info": {...}, "delta": Delta}
    {"op": "close"}  -> {"ok": true}   (ends the session; WebSocket: also the connection)

A session with no request for ``limits.idle_timeout_s`` is closed and its env released; over
WebSocket the server then closes the connection with code ``WS_IDLE_CLOSE`` and a reason
saying why (:func:`idle_reason`), and the client raises that on its next call.

Errors: ``{"ok": false, "error": {"type": "ConfigError", "message": "..."}, "seq": n}``; the
type names a class of ``agentgym.errors`` and the client raises that class.

Over HTTP: ``POST /v1/sessions`` (hello), ``POST /v1/sessions/{id}`` (a request; header
``X-Agentgym-Secret: <secret>``), ``DELETE /v1/sessions/{id}``, ``GET /healthz``; every POST body
is ``Content-Type: application/json``. A server that requires a token (``agentgym.serving.guard``)
wants ``Authorization: Bearer <token>`` on every request and on the WebSocket handshake.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from agentgym import errors

__all__ = [
    "HTTP_PREFIX",
    "PROTOCOL",
    "READY_PREFIX",
    "SAFE_KWARGS",
    "SECRET_HEADER",
    "TOKEN_ENV",
    "WS_IDLE_CLOSE",
    "WS_PATH",
    "Delta",
    "Limits",
    "decode",
    "decode_action",
    "encode",
    "encode_action",
    "error_from_wire",
    "error_reply",
    "idle_reason",
    "jsonable",
]

PROTOCOL = 1
HTTP_PREFIX = "/v1/sessions"
WS_PATH = "/ws"  # the WebSocket endpoint of `agentgym serve env`
TOKEN_ENV = "AGENTGYM_SERVE_TOKEN"  # the servers' token, for servers and clients (agentgym.serving.guard)
SECRET_HEADER = "x-agentgym-secret"  # an HTTP session's secret (Authorization carries the server's token)
# `agentgym serve env` prints one line starting with this once it accepts connections.
READY_PREFIX = "AGENTGYM_SERVE_READY"
# The WebSocket close code of a session closed for having no request for ``idle_timeout_s``
# (4000-4999 are the application's own codes; 408 as in HTTP's Request Timeout). The close
# reason says why and how to avoid it (:func:`idle_reason`); the client raises it as an error.
WS_IDLE_CLOSE = 4408

# Constructor keywords a client may set by default: budgets, reward mode, prompt style, task
# selection. Everything else (sandbox backend, file paths, database or server URLs) is the
# operator's to set (`agentgym serve env --env-kwarg`) or to open up (`--allow-kwarg`): a client
# choosing `sandbox="unsafe-local"` or `dataset="/etc/..."` would run or read things on the host.
SAFE_KWARGS: frozenset[str] = frozenset({
    "reward_mode", "max_turns", "max_tokens", "max_action_tokens", "shaping", "prompt",
    "split", "level", "levels", "families", "difficulty", "depth", "fail_rate",
    "request_timeout", "command_timeout", "sandbox_seconds", "max_output_chars", "max_file_bytes",
})


MAX_ACTION_ITEMS = 1 << 16  # values in one action sent as a declared array (dtype, shape, data)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one ``agentgym serve env`` process accepts (sent to clients in the hello reply)."""

    max_sessions: int = 256  # env instances held at once (one per session)
    # Of those, held by one client address; 0: half of max_sessions (at least 1), so one client
    # cannot lock every other out, while a trainer's pools (train + eval envs + a probe: 65 by
    # default, 97 in the largest CPU recipe, measured) fit under the default 128.
    max_client_sessions: int = 0
    max_message_bytes: int = 1 << 20  # one request; actions of 4096 tokens are ~30 KB
    max_action_items: int = MAX_ACTION_ITEMS  # values in one declared array action (module doc)
    idle_timeout_s: float = 300.0  # a session (HTTP or WebSocket) with no request for this long is closed
    detach_grace_s: float = 30.0  # a WebSocket session whose connection dropped waits this long
    hello_timeout_s: float = 10.0  # a connection that does not say hello in time is dropped
    header_timeout_s: float = 10.0  # a connection idle, or slow with its request headers, is closed
    body_timeout_s: float = 30.0  # an HTTP request body that takes longer is refused (408)

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise errors.ConfigError(f"max_sessions must be at least 1, got {self.max_sessions}")
        if self.max_client_sessions == 0:  # the default: derived here, the one place it is
            object.__setattr__(self, "max_client_sessions", max(1, self.max_sessions // 2))
        if not 1 <= self.max_client_sessions <= self.max_sessions:
            raise errors.ConfigError(
                f"max_client_sessions (--max-client-sessions) must be between 1 and max_sessions "
                f"(--max-sessions, {self.max_sessions}), got "
                f"{self.max_client_sessions}; raise --max-sessions too, or leave --max-client-sessions out "
                f"for half of --max-sessions")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def idle_reason(idle_timeout_s: float) -> str:
    """Why a session was closed for silence, and how to avoid it (a WebSocket close reason: <= 123 bytes)."""
    return f"no request for {idle_timeout_s:g} s; raise --idle-timeout on the server or keep stepping"


class Delta(TypedDict):
    """What a step appended to the episode's trajectory (the client keeps a mirror of it)."""

    tokens: list[int]  # every token appended this step: kept action tokens, then observation
    policy_mask: list[int]  # 1 for action tokens, 0 for observation tokens
    turn: dict[str, Any]  # the Turn record (dataclasses.asdict)
    terminated: bool
    truncated: bool
    meta: dict[str, Any]  # the trajectory's meta after this step


def jsonable(x: Any) -> Any:
    """``x`` with numpy scalars/arrays and tuples turned into JSON types (for info dicts)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)  # JSON has no NaN/inf; the value is kept readable
    return x


def encode(msg: dict[str, Any]) -> str:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False)


def decode(raw: str | bytes, *, max_bytes: int) -> dict[str, Any]:
    """Parse one message, refusing oversized or non-object payloads with a ConfigError."""
    if len(raw) > max_bytes:
        raise errors.ConfigError(f"message of {len(raw)} bytes is over this server's limit of {max_bytes}; "
                                 "send shorter actions or start the server with a larger --max-message-bytes")
    try:
        msg = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise errors.ConfigError(f"expected one JSON object per message, got unparseable data ({e})") from None
    except RecursionError:
        raise errors.ConfigError("expected one JSON object per message, got one nested too deeply") from None
    if not isinstance(msg, dict):
        raise errors.ConfigError(f"expected a JSON object per message, got {type(msg).__name__}")
    return msg


# --------------------------------------------------------------------------------- actions
# An action crosses the wire so that the server's env sees what the local env would have seen:
# a 1-D integer array travels as a list of ids; anything else (2-D, floats, strings) as its
# shape, dtype and values, so the env rejects it with the same message it gives locally.
Action = list[int] | dict[str, Any]


def encode_action(action: Any) -> Action:
    try:
        arr = np.asarray(action)
    except Exception:  # ragged lists, objects numpy refuses
        return {"unconvertible": True}
    if arr.ndim == 1 and arr.dtype.kind in "iu":
        return [int(i) for i in arr.tolist()]
    if arr.dtype.kind not in "iufbU":
        return {"unconvertible": True}
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "data": arr.tolist()}


# The dtypes an action may declare: booleans, integers and floats of up to 8 bytes, and strings.
# Checked on the string, before numpy parses it; the array is then built only if it fits in
# MAX_ACTION_BYTES (a declared "<U100000000" would otherwise allocate 400 MB per value).
_ACTION_DTYPE = re.compile(r"[<>|=]?(?:b1|[iu][1248]|f[248]|U\d{1,9})")
MAX_ACTION_BYTES = 16 << 20
_BAD_ACTION: Any = [[0], [0, 0]]  # not an action: a ragged value the env rejects as a bad action


def _leaves(data: Any, cap: int) -> int:
    """The number of values in a nested list, counting no further than ``cap + 1``."""
    count, stack = 0, [data]
    while stack and count <= cap:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        else:
            count += 1
    return count


def decode_action(a: Any, *, max_items: int = MAX_ACTION_ITEMS) -> Any:
    """The server side of :func:`encode_action`: an object ``ToolEnv.step`` accepts or rejects.

    A declared array is built only when its dtype is one the wire carries (``_ACTION_DTYPE``),
    it holds at most ``max_items`` values and fits in ``MAX_ACTION_BYTES``; anything else
    becomes a bad action."""
    if isinstance(a, list):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in a):
            return _BAD_ACTION
        return np.asarray(a, dtype=np.int64)
    if not isinstance(a, dict) or not isinstance(a.get("dtype"), str):
        return _BAD_ACTION
    shape, data = a.get("shape"), a.get("data")
    if _ACTION_DTYPE.fullmatch(a["dtype"]) is None or not (
            isinstance(shape, list) and len(shape) <= 8
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        return _BAD_ACTION
    dtype = np.dtype(a["dtype"])  # a dtype object: nothing allocated yet
    items = max(math.prod(shape), _leaves(data, max_items))
    if items > max_items or items * dtype.itemsize > MAX_ACTION_BYTES:
        return _BAD_ACTION
    try:
        return np.asarray(data, dtype=dtype).reshape(shape)
    except (TypeError, ValueError, OverflowError):
        return _BAD_ACTION


# --------------------------------------------------------------------------------- errors
def error_reply(exc: BaseException, seq: int | None = None) -> dict[str, Any]:
    name = type(exc).__name__ if isinstance(exc, errors.AgentGymError) else "ServiceError"
    text = str(exc) if isinstance(exc, errors.AgentGymError) else f"{type(exc).__name__}: {exc}"
    out: dict[str, Any] = {"ok": False, "error": {"type": name, "message": text}}
    if seq is not None:
        out["seq"] = seq
    return out


def error_from_wire(err: Any, where: str) -> errors.AgentGymError:
    """The exception a client raises for an error reply (a class of agentgym.errors)."""
    if not isinstance(err, dict):
        return errors.ServiceError(f"{where}: malformed error reply {err!r}")
    cls = getattr(errors, str(err.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.AgentGymError)):
        cls = errors.ServiceError
    return cls(f"{where}: {err.get('message', '')}")
