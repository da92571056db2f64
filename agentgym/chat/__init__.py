"""Chat and tool calling beside the token API: any chat model can play an agentgym environment.

* :class:`ChatWrapper`: an environment as OpenAI-style messages and function tools, built on
  the token API (the trajectory stays the exact token record).
* :class:`OpenAIChatPolicy`: plays episodes against any OpenAI-compatible chat server
  (``agentgym-eval --policy openai-chat``).
* :mod:`agentgym.chat.messages`: the one mapping between chat messages and Harmony, shared
  with agentgym's own chat server (``agentgym serve model``, :mod:`agentgym.serving.chat_server`);
* :mod:`agentgym.chat.chat_wire`: the OpenAI chat-completions request and reply, shared likewise.

This is the client side and stays in the core: a wrapper and a policy that speak to *any*
OpenAI-compatible server (hosted APIs, vLLM, SGLang), not only agentgym's. The server side
lives in :mod:`agentgym.serving`, which imports this package, never the other way round.
"""

from __future__ import annotations

from agentgym.chat.messages import tool_schemas
from agentgym.chat.policy import OpenAIChatPolicy
from agentgym.chat.wrapper import ChatWrapper

__all__ = ["ChatWrapper", "OpenAIChatPolicy", "tool_schemas"]
