"""``ChatWrapper``: an agentgym environment as an OpenAI-style chat with tool calling.

Built on the token API, never beside it. ``reset`` returns the conversation so far (the
env's instructions as the system message, the task as the user message) and puts the tools,
as OpenAI function schemas generated from the episode's own ``Tool`` objects, in
``info["tools"]`` (and ``wrapper.tools``). ``step(assistant_message)`` turns the message into
the Harmony action a GPT-OSS model would have sampled (``agentgym.chat.messages``), steps
the token env with it, and returns the messages the env appended: a tool message answering
the call, or a user notice. Rewards, termination, truncation and ``info`` are the token env's,
so the trajectory record (``env.unwrapped.trajectory``) is exact and replays token for token.

``wrapper.messages`` is the whole conversation as the env read it: send it as the next
request. It holds the assistant message normalised (call ids assigned, only the first of
several parallel tool calls: Harmony runs one call per turn; the others are listed in
``info["dropped_tool_calls"]``), so it never disagrees with the token stream.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.chat.messages import action_ids, assistant_turn, observation_messages, tool_schemas
from agentgym.chat.spaces import AssistantMessageSpace, ChatMessagesSpace
from agentgym.env import ToolEnv
from agentgym.errors import ActionTypeError, ConfigError, EnvStateError

__all__ = ["ChatWrapper"]


class ChatWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):  # type: ignore[type-arg]  # messages in/out over an ndarray env
    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)  # so env.spec can re-make the wrapped env
        gym.Wrapper.__init__(self, env)
        inner = env.unwrapped
        if not isinstance(inner, ToolEnv):
            raise ConfigError(f"ChatWrapper wraps agentgym environments (ToolEnv subclasses); "
                              f"got {type(inner).__name__}")
        self.inner: ToolEnv = inner
        self.codec = inner.codec
        self.observation_space = ChatMessagesSpace()
        self.action_space = AssistantMessageSpace()
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self._n_calls = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        _, info = self.env.reset(seed=seed, options=options)
        inner = self.inner
        assert inner.task is not None
        tools = inner.episode_tools
        self.tools = tool_schemas(tools)
        self.action_space = AssistantMessageSpace([t.name for t in tools])
        self.messages = [{"role": "system", "content": inner.instructions},
                         {"role": "user", "content": inner.task.prompt}]
        self._n_calls = 0
        info = {**info, "tools": copy.deepcopy(self.tools), "reasoning_effort": inner.reasoning_effort}
        return copy.deepcopy(self.messages), info

    def step(self, action: Any) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        if not self.messages:
            raise EnvStateError("ChatWrapper.step() called before reset()")
        if not isinstance(action, (str, Mapping)) and not hasattr(action, "model_dump"):
            hint = (f"; pass one message, e.g. the last: step(messages[-1]) (got a list of {len(action)})"
                    if isinstance(action, (list, tuple)) else "")
            raise ActionTypeError(f"ChatWrapper.step() takes one assistant message (a dict with content "
                                  f"and/or tool_calls, or a str), got {type(action).__name__}{hint}")
        turn = assistant_turn(action)
        if turn.call is not None and not turn.call["id"]:
            turn.call["id"] = f"call_{self._n_calls}"  # deterministic: same episode, same ids
        self._n_calls += turn.call is not None
        ids = action_ids(self.codec, turn)
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(ids, dtype=np.int64))
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.call is not None:
            message["tool_calls"] = [turn.call]
        new = self._observation(obs, turn.call["id"] if turn.call is not None else None)
        self.messages += [message, *new]
        info = {**info, "assistant_message": copy.deepcopy(message),
                "dropped_tool_calls": copy.deepcopy(turn.dropped), "message_notes": list(turn.notes)}
        return copy.deepcopy(new), float(reward), terminated, truncated, info

    def _observation(self, obs: np.ndarray, call_id: str | None) -> list[dict[str, Any]]:
        ids = obs.tolist()
        try:
            return observation_messages(self.codec, ids, call_id)
        except ValueError:  # an env that appends something else: show it whole, as a user turn
            return [{"role": "user", "content": self.inner.tokenizer.decode(ids)}] if ids else []
