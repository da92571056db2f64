"""An agentgym episode's tools as a verifiers (v1) toolset: a task-scoped MCP server.

verifiers launches it once per rollout (``python -m agentgym.environments.interop.verifiers_tools``)
and hands it the rollout's task data (:class:`~.verifiers_export.AgentGymData`); the server makes
the env, resets it to the task and advertises the episode's tools under their own names (no
server prefix) with the env's exact JSON schemas, so the model sees what agentgym's own prompt
lists. Each call is one agentgym turn: the call is stepped through :class:`~agentgym.ChatWrapper`
into the live env and the env's reply (the tool's result, or agentgym's notice for a malformed
call) is the MCP result. The episode's verdict is not taken here: the task's reward replays the
whole conversation in a fresh env (:func:`~.verifiers_export.replay`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from typing import Any

import verifiers.v1 as vf

__all__ = ["AgentGymTools"]


class AgentGymTools(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the env's tool names, bare: what agentgym's own prompt calls them

    def __init__(self, config: vf.ToolsetConfig) -> None:
        super().__init__(config)
        self.env: Any = None
        self._lock = asyncio.Lock()

    async def setup_task(self, task: Any) -> None:
        from agentgym.environments.interop.verifiers_export import _make

        self.env = _make(task)
        self.env.reset(seed=task.seed, options=task.options or None)

    def register(self, mcp: Any) -> None:
        if self.env is None:
            return
        for schema in self.env.tools:
            fn = schema["function"]
            call = self._caller(fn["name"], fn["parameters"])
            # MCPServer infers a schema from the signature; the env's own schema replaces it
            # (descriptions, bounds and all), through the manager's returned Tool (mcp 2.0).
            tool = mcp._tool_manager.add_tool(call, name=fn["name"], description=fn["description"])
            tool.parameters = fn["parameters"]

    def _caller(self, name: str, schema: dict[str, Any]) -> Any:
        required = set(schema.get("required") or [])
        params = [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=Any,
                                    default=inspect.Parameter.empty if p in required else None)
                  for p in (schema.get("properties") or {})]

        async def call(**arguments: Any) -> str:
            args = {k: v for k, v in arguments.items() if v is not None or k in required}
            async with self._lock:
                return await asyncio.to_thread(self._step, name, args)

        call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
        call.__name__ = name
        return call

    def _step(self, name: str, arguments: dict[str, Any]) -> str:
        from agentgym.errors import EnvStateError

        action = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]}
        try:
            new, _, terminated, truncated, info = self.env.step(action)
        except EnvStateError as e:
            return f"[agentgym] the episode is over: {e}"
        text = "\n".join(str(m["content"]) for m in new)
        if truncated and not text:
            text = f"[agentgym] the episode was truncated: {info.get('error') or 'turn or token budget spent'}"
        return text


if __name__ == "__main__":
    AgentGymTools.run()
