"""``agentgym/Remote-v0``: an environment served by ``agentgym serve env``, with the local token API.

    env = gym.make("agentgym/Remote-v0", url="ws://127.0.0.1:8700/ws", env_id="agentgym/Math-v1",
                   reward_mode="shaped")
    obs, info = env.reset(seed=0)        # the same ids the local env returns for seed 0
    obs, reward, terminated, truncated, info = env.step(action_ids)

One session (one environment instance on the server) per client, opened when the client is
made. The client keeps a mirror of the episode's :class:`Trajectory` (the server sends what
each step appended), so ``env.unwrapped.trajectory`` and ``.codec`` work as with a local env and
the trainer's collector needs no change. Same seed and keyword arguments, same tokens,
rewards and info as the local env (tested token for token on every registered env).

A server that requires a token (bound to anything but loopback) gets the one in the environment
variable ``token_env`` (default ``AGENTGYM_SERVE_TOKEN``): the token is never a keyword argument,
so it is not recorded with the env's spec.

Errors: a server that cannot be reached, a session that was lost, or a request that timed out
raise :class:`ServiceLost` (a ServiceError and an InfraError: the episode in flight is lost, and
the trainer and agentgym-eval count it as an infrastructure fault; ``reset()`` opens a new
session if needed; a session the server ended for having no request for its ``--idle-timeout``
raises :class:`SessionEnded`, a ServiceLost, on the next ``step``, and ``reset()`` simply opens a
new one); an infrastructure fault of the served env comes back as it does locally
(``info["infra_error"]``); mistakes of the caller (step before reset, refused keyword arguments, a tokenizer
that differs from the server's) raise the same classes as locally. Bad actions never raise.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.env import as_action_array, token_space
from agentgym.errors import ConfigError, EnvStateError, InfraError, ServiceError, ServiceLost, SessionEnded
from agentgym.harmony import HarmonyCodec
from agentgym.serving import env_wire
from agentgym.serving.env_channels import Channel, make_channel
from agentgym.tokenizers import Tokenizer, as_tokenizer
from agentgym.trajectory import Trajectory, Turn

__all__ = ["RemoteEnv"]


class _State(enum.Enum):
    READY = "ready"  # session open, not reset
    RUNNING = "running"
    DONE = "done"
    BROKEN = "broken"  # the last request failed: the episode is lost, reset() to go on
    CLOSED = "closed"


class RemoteEnv(gym.Env[np.ndarray, np.ndarray]):
    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (gymnasium declares it an instance var)
    # The served env's splits, as the server reports them when the session opens: ``split`` (a
    # keyword argument) and ``options={"split": ...}`` pass through to it unchanged.
    splits: tuple[str, ...] = ()

    def __init__(self, *, url: str, env_id: str, tokenizer: Tokenizer | Any = None, timeout: float = 60.0,
                 connect_timeout: float = 10.0, reconnect_attempts: int = 3, backoff_s: float = 0.2,
                 token_env: str = env_wire.TOKEN_ENV, channel: Channel | None = None, render_mode: str | None = None,
                 **env_kwargs: Any) -> None:
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if not (timeout > 0 and connect_timeout > 0 and reconnect_attempts >= 0):
            raise ConfigError(f"expected timeout > 0, connect_timeout > 0, reconnect_attempts >= 0; got "
                              f"{timeout!r}, {connect_timeout!r}, {reconnect_attempts!r}")
        try:
            json.dumps(env_kwargs, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"the env's keyword arguments cross the network as JSON; {e}. Pass plain "
                              "values (numbers, strings, lists, dicts), or set objects on the server "
                              "(agentgym serve env --env-kwarg)") from None
        self.url, self.remote_id, self.render_mode = url, env_id, render_mode
        self.tokenizer = as_tokenizer(tokenizer)
        self.codec = HarmonyCodec(self.tokenizer)
        self.observation_space = token_space(self.tokenizer.vocab_size)  # type: ignore[assignment]
        self.action_space = token_space(self.tokenizer.vocab_size)  # type: ignore[assignment]
        self._hello = {"op": "hello", "protocol": env_wire.PROTOCOL, "env_id": env_id, "kwargs": env_kwargs,
                       "tokenizer": {"name": getattr(self.tokenizer, "name", type(self.tokenizer).__name__),
                                     "vocab_size": int(self.tokenizer.vocab_size)}}
        self.channel: Channel = channel or make_channel(
            url, timeout=timeout, connect_timeout=connect_timeout, reconnect_attempts=reconnect_attempts,
            backoff_s=backoff_s, token=os.environ.get(token_env) or None)
        self.trajectory: Trajectory | None = None
        self.counts: dict[str, int] = {}
        self._seq = 0
        self._state = _State.CLOSED  # until the session is open
        self._open()

    @property
    def env_id(self) -> str:
        return self.remote_id

    def _open(self) -> None:
        welcome = self.channel.open(self._hello)
        self.session_id: str = welcome["session"]
        self.limits: dict[str, Any] = welcome.get("limits", {})
        self.splits = tuple(welcome.get("splits", ()))
        self._seq = 0
        self._state = _State.READY

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._seq += 1
        msg["seq"] = self._seq
        try:
            reply = self.channel.request(msg)
        except ServiceError as e:  # the server is gone, hung or lost the session: the episode is lost
            self._state = _State.BROKEN
            if isinstance(e, InfraError):
                raise
            raise ServiceLost(str(e)) from None
        if not reply.get("ok"):
            if reply.get("seq") != self._seq:  # refused before it was applied: the seq is not used up
                self._seq -= 1
            raise env_wire.error_from_wire(reply.get("error"), f"{self.remote_id} at {self.url}, {msg['op']}")
        if reply.get("seq") != self._seq:
            self._state = _State.BROKEN
            raise ServiceError(f"reply for request {reply.get('seq')} arrived for request {self._seq}; "
                               "the connection is out of step; reset() to start over")
        return reply

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if self._state is _State.CLOSED:
            raise EnvStateError(f"{self.remote_id} is closed; make a new environment")
        super().reset(seed=seed)
        if self._state is _State.BROKEN:  # the session may be gone (server restart): a new one
            self._open()  # (the channel ends its previous session first)
        try:
            reply = self._call({"op": "reset", "seed": seed, "options": options})
        except SessionEnded:
            # The server ended the session while it sat unused (no request for its --idle-timeout,
            # e.g. during a long update): a reset has no episode to lose, so it starts a new one.
            self._open()
            reply = self._call({"op": "reset", "seed": seed, "options": options})
        self.trajectory = Trajectory.from_dict(reply["trajectory"])
        self.counts = {}
        self._state = _State.RUNNING
        return np.asarray(reply["obs"], dtype=np.int64), reply["info"]

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._state is not _State.RUNNING:
            raise EnvStateError(
                f"{self.remote_id} is closed" if self._state is _State.CLOSED
                else "the last request to the server failed and the episode is lost; call reset()"
                if self._state is _State.BROKEN
                else f"step() called on a {self._state.value} environment; call reset() first")
        as_action_array(action)  # a program's wrong type raises here, as it does locally
        reply = self._call({"op": "step", "action": env_wire.encode_action(action)})
        self._apply(reply["delta"])
        info = reply["info"]
        self.counts = dict(info.get("counts", {}))
        if reply["terminated"] or reply["truncated"]:
            self._state = _State.DONE
        return (np.asarray(reply["obs"], dtype=np.int64), float(reply["reward"]), bool(reply["terminated"]),
                bool(reply["truncated"]), info)

    def _apply(self, d: dict[str, Any]) -> None:
        traj = self.trajectory
        assert traj is not None
        fields = {f.name for f in dataclasses.fields(Turn)}
        traj.tokens += d["tokens"]
        traj.policy_mask += d["policy_mask"]
        traj.logprobs += [None] * len(d["tokens"])
        traj.turns.append(Turn(**{k: v for k, v in d["turn"].items() if k in fields}))
        traj.terminated, traj.truncated, traj.meta = d["terminated"], d["truncated"], d["meta"]

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.trajectory is None:
            return None
        return self.tokenizer.decode(self.trajectory.tokens)

    def close(self) -> None:
        if self._state is _State.CLOSED and getattr(self, "channel", None) is None:
            return
        self._state = _State.CLOSED
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
            self.channel = None  # type: ignore[assignment]
        super().close()

    def __del__(self) -> None:  # a dropped client frees its server session now, not after the grace
        try:
            self.close()
        except Exception:
            pass
