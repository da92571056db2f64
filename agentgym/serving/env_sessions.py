"""Server side, without I/O: sessions of one served environment.

A :class:`Session` owns one environment instance and answers the requests of one client
(``reset``, ``step``) in order; the last reply is kept so that a request resent after a
reconnect (same ``seq``) is answered again instead of being applied twice. A
:class:`SessionManager` creates sessions up to a cap, checks what clients may pass to the
environment's constructor, and closes sessions whose client went away (detached WebSocket
sessions after a grace period, idle HTTP sessions after a timeout; an attached WebSocket
session that stays silent is ended by its connection's handler). The ASGI app in
``env_server.py`` is only the transport around this.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.errors import ConfigError, EnvStateError, ServiceError
from agentgym.serving import env_wire

__all__ = ["Session", "SessionManager"]


class Session:
    """One client's environment. Not thread-safe by itself: the manager serialises its requests."""

    def __init__(self, env: gym.Env, env_id: str, transport: str, client: str = "unknown",
                 max_action_items: int = env_wire.MAX_ACTION_ITEMS) -> None:
        self.id = secrets.token_urlsafe(12)
        self.secret = secrets.token_urlsafe(24)
        self.env, self.env_id = env, env_id
        self.transport = transport  # "ws" (ends with its connection) or "http" (ends when idle)
        self.client = client  # the client's address (sessions per client are capped)
        self.max_action_items = max_action_items
        self.lock = threading.Lock()  # one request at a time per session
        self.last_seq = 0
        self.last_reply: dict[str, Any] | None = None
        self.attached = False  # a WebSocket connection currently speaks for it
        self.generation = 0  # bumped by each connection that attaches (a resume takes over)
        self.touched = time.monotonic()
        self.closed = False

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Apply one ``reset``/``step`` request (in a worker thread: env calls block)."""
        seq = msg.get("seq")
        with self.lock:
            self.touched = time.monotonic()
            if not isinstance(seq, int) or isinstance(seq, bool):
                return env_wire.error_reply(ConfigError(f"expected an integer 'seq', got {seq!r}"))
            if seq == self.last_seq and self.last_reply is not None:
                return self.last_reply  # a resend after a reconnect: answer, do not re-apply
            if seq != self.last_seq + 1:
                return env_wire.error_reply(ConfigError(
                    f"request seq {seq} out of order: expected {self.last_seq + 1} (or {self.last_seq} "
                    "to repeat the last request)"), seq)
            if self.closed:
                return env_wire.error_reply(EnvStateError(f"session {self.id} is closed"), seq)
            try:
                reply = self._apply(msg)
            except Exception as e:  # programmer errors of the client travel back as errors
                reply = env_wire.error_reply(e)
            reply["seq"] = seq
            self.last_seq, self.last_reply = seq, reply
            # The idle clock starts when the reply leaves, so a step longer than the idle
            # timeout does not leave its session to be reaped before the client can answer.
            self.touched = time.monotonic()
            return reply

    def _apply(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "reset":
            seed, options = msg.get("seed"), msg.get("options")
            if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
                raise ConfigError(f"reset: seed must be an integer or null, got {seed!r}")
            if options is not None and not isinstance(options, dict):
                raise ConfigError(f"reset: options must be an object or null, got {options!r}")
            obs, info = self.env.reset(seed=seed, options=options)
            traj = self.env.unwrapped.trajectory  # type: ignore[attr-defined]
            return {"ok": True, "obs": np.asarray(obs).tolist(), "info": env_wire.jsonable(info),
                    "trajectory": env_wire.jsonable(traj.to_dict())}
        if op == "step":
            if "action" not in msg:
                raise ConfigError("step: missing 'action'")
            traj = self.env.unwrapped.trajectory  # type: ignore[attr-defined]
            start = len(traj.tokens) if traj is not None else 0
            action = env_wire.decode_action(msg["action"], max_items=self.max_action_items)
            obs, reward, terminated, truncated, info = self.env.step(action)
            traj = self.env.unwrapped.trajectory  # type: ignore[attr-defined]
            delta: env_wire.Delta = {
                "tokens": traj.tokens[start:], "policy_mask": traj.policy_mask[start:],
                "turn": env_wire.jsonable(dataclasses.asdict(traj.turns[-1])),
                "terminated": traj.terminated, "truncated": traj.truncated,
                "meta": env_wire.jsonable(traj.meta)}
            return {"ok": True, "obs": np.asarray(obs).tolist(), "reward": float(reward),
                    "terminated": bool(terminated), "truncated": bool(truncated),
                    "info": env_wire.jsonable(info), "delta": dict(delta)}
        raise ConfigError(f"unknown op {op!r}; expected 'reset', 'step' or 'close'")

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.env.close()


MakeEnv = Callable[..., gym.Env]


class SessionManager:
    """The sessions of one ``agentgym serve env`` process: creation under a cap, lookup, reaping."""

    def __init__(self, env_id: str, *, limits: env_wire.Limits | None = None,
                 env_kwargs: dict[str, Any] | None = None, allow_kwargs: frozenset[str] = env_wire.SAFE_KWARGS,
                 tokenizer: Any = None, make_env: MakeEnv | None = None) -> None:
        from agentgym.tokenizers import as_tokenizer

        self.env_id = env_id
        self.limits = limits or env_wire.Limits()
        self.env_kwargs = dict(env_kwargs or {})
        self.allow_kwargs = frozenset(allow_kwargs)
        self.tokenizer = as_tokenizer(tokenizer)
        self._make_env: MakeEnv = make_env or gym.make
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}  # sessions being created, per client (counted against the caps)
        self.created = 0

    # ------------------------------------------------------------------ identity
    def tokenizer_info(self) -> dict[str, Any]:
        tok = self.tokenizer
        return {"name": getattr(tok, "name", type(tok).__name__), "vocab_size": int(tok.vocab_size)}

    def health(self) -> dict[str, Any]:
        return {"ok": True, "env_id": self.env_id, "sessions": len(self._sessions),
                "created": self.created, "limits": self.limits.to_dict(), "protocol": env_wire.PROTOCOL}

    # ------------------------------------------------------------------ lifecycle
    def open(self, hello: dict[str, Any], transport: str = "ws", client: str = "unknown") -> Session:
        """Check a hello message and create its session (blocking: builds the env).

        ``client``: the client's address; it may hold at most ``limits.max_client_sessions``."""
        if hello.get("protocol") != env_wire.PROTOCOL:
            raise ConfigError(f"protocol {hello.get('protocol')!r} is not spoken here (server speaks "
                              f"{env_wire.PROTOCOL}); use the same agentgym version on both sides")
        if hello.get("env_id") != self.env_id:
            raise ConfigError(f"this server serves {self.env_id!r}, not {hello.get('env_id')!r}; "
                              "connect to the server of that env or pass env_id=" + repr(self.env_id))
        want = hello.get("tokenizer") or {}
        have = self.tokenizer_info()
        if (want.get("name"), want.get("vocab_size")) != (have["name"], have["vocab_size"]):
            raise ConfigError(f"tokenizer mismatch: the client encodes with {want!r}, the server's env "
                              f"with {have!r}; the token ids would mean different things. Start the "
                              "server with the client's tokenizer (agentgym serve env --tokenizer PATH) or "
                              "pass the server's tokenizer to the client")
        kwargs = hello.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"kwargs must be an object, got {type(kwargs).__name__}")
        refused = sorted(set(kwargs) - self.allow_kwargs)
        if refused:
            raise ConfigError(f"this server does not let clients set {refused}; clients may set "
                              f"{sorted(self.allow_kwargs)}. The operator fixes the others with "
                              "`agentgym serve env --env-kwarg KEY=JSON` or opens them with --allow-kwarg KEY")
        with self._lock:
            if len(self._sessions) + sum(self._reserved.values()) >= self.limits.max_sessions:
                raise ServiceError(f"server at capacity: {self.limits.max_sessions} sessions are open "
                                   f"(--max-sessions); retry later, close idle envs, start the server with "
                                   "a larger --max-sessions, or start another `agentgym serve env`")
            held = sum(s.client == client for s in self._sessions.values()) + self._reserved.get(client, 0)
            if held >= self.limits.max_client_sessions:
                raise ServiceError(
                    f"client at capacity: {client} holds {held} sessions, this server's limit per client "
                    f"address (--max-client-sessions {self.limits.max_client_sessions}, by default half of "
                    f"--max-sessions {self.limits.max_sessions}); close idle envs, or start the server with "
                    "a larger --max-client-sessions (a trainer holds rollout.tasks_per_step x "
                    "samples_per_task + log.eval_episodes envs per collecting process)")
            self._reserved[client] = self._reserved.get(client, 0) + 1
        try:
            env = self._build(kwargs)
        finally:
            with self._lock:
                self._reserved[client] -= 1
                if not self._reserved[client]:
                    del self._reserved[client]
        session = Session(env, self.env_id, transport, client, self.limits.max_action_items)
        with self._lock:
            self._sessions[session.id] = session
            self.created += 1
        return session

    def _build(self, client_kwargs: dict[str, Any]) -> gym.Env:
        merged = {**client_kwargs, **self.env_kwargs}  # the operator's values win
        try:
            return self._make_env(self.env_id, **merged, tokenizer=self.tokenizer)
        except TypeError as e:  # an unknown keyword of a constructor that does not say it itself
            raise ConfigError(f"{self.env_id} rejected the keyword arguments {sorted(merged)} (the client's "
                              f"{sorted(client_kwargs)}, the server's {sorted(self.env_kwargs)}): {e}") from None

    def check(self) -> None:
        """Build one env with the server's own keyword arguments and start an episode: a typo in
        ``agentgym serve env --env-kwarg``, or infrastructure the env needs and cannot reach (no
        Docker engine for CodeFix), fails at start-up, before the server says it is ready, not
        at every client's first reset."""
        env = self._build({})
        try:
            _, info = env.reset(seed=0)
            if info.get("infra_error"):
                raise ServiceError(f"{self.env_id} cannot start an episode: {info['infra_error']}; fix its "
                                   "infrastructure before serving it")
        finally:
            env.close()

    def get(self, session_id: str, secret: str) -> Session:
        s = self._sessions.get(session_id)
        if s is None or not secrets.compare_digest(s.secret, secret):
            raise EnvStateError(f"no session {session_id!r} here (closed after its client went away or sent "
                                f"no request for {self.limits.idle_timeout_s:g} s (--idle-timeout), or the "
                                "server restarted); call reset() to start a new one")
        return s

    def close(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
        session.close()

    def reap(self, now: float | None = None) -> list[Session]:
        """Sessions whose client is gone: detached past the grace period, or idle too long.

        An attached WebSocket session is its connection's to end (``env_server``: it closes
        the connection with a reason); a session whose request is running is never reaped."""
        now = time.monotonic() if now is None else now
        gone = []
        with self._lock:
            for s in list(self._sessions.values()):
                if s.attached or s.lock.locked():
                    continue
                limit = self.limits.detach_grace_s if s.transport == "ws" else self.limits.idle_timeout_s
                if now - s.touched > limit:
                    gone.append(self._sessions.pop(s.id))
        for s in gone:
            s.close()
        return gone

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            s.close()

    def __len__(self) -> int:
        return len(self._sessions)


def parse_env_kwarg(item: str) -> tuple[str, Any]:
    """``KEY=JSON`` (a bare word is taken as a string) for ``--env-kwarg``."""
    if "=" not in item:
        raise ConfigError(f"--env-kwarg {item!r}: expected KEY=VALUE, e.g. sandbox=\"docker\" or max_turns=8")
    key, raw = item.split("=", 1)
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw
