"""Chat and tool calling beside the token API: any chat model can play an agentgym environment.

* :class:`ChatWrapper`: an environment as OpenAI-style messages and function tools, built on
  the token API (the trajectory stays the exact token record).
* :class:`OpenAIChatPolicy`: plays episodes against any OpenAI-compatible chat server
  (``agentgym-eval --policy openai-chat``).
* :mod:`agentgym.chat.messages`: the one mapping between chat messages and Harmony, shared
  with agentgym's own chat server (``agentgym-train serve``).
"""

from __future__ import annotations

from agentgym.chat.messages import tool_schemas
from agentgym.chat.policy import OpenAIChatPolicy
from agentgym.chat.wrapper import ChatWrapper

__all__ = ["ChatWrapper", "OpenAIChatPolicy", "tool_schemas"]
