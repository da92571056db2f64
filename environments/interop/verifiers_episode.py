"""One seat of a verifiers (v1) episode, played from agentgym's token env.

verifiers 0.4 writes a multi-turn environment as a ``vf.Env`` whose ``run(task, agents)`` drives
its agents turn by turn: ``async with agents.NAME.interaction(task) as chat: segment = await
chat.turn(message)``. The env's own code plays the user (a game engine or a checker answering each
reply, as verifiers' TextArena and OpenEnv envs do), or another agent does (verifiers' ``user-sim``
env: an LLM plays the user). ``Env.finalize`` then judges the episode across its traces.

Here verifiers' ``Env.setup``/``run``/``finalize`` and each task's own scoring run for real, in a
driver thread with its own event loop. The seat under training is a :class:`AgentgymSeat`: its
``turn(message)`` hands the message to agentgym (the next user message of the token episode) and
waits for the policy's final answer; the other seats are verifiers' own agents (their harness,
runtime and model endpoint), built by the env itself. Exactly one side acts at a time (a
:class:`Bridge` of two queues), so the live ``vf.Trace`` of the seat is never written by both.

The seat keeps verifiers' interaction contract: a prompted task speaks first (a bare ``turn()``),
a prompt-less one is opened by the caller's message; the task's ``@vf.stop`` hooks over the trace
end the exchange (a terminated segment); leaving the interaction closes it as ``user_closed`` and
scores the trace with the task's rewards. Not carried over: request/response ``@stop`` and
``@intercept`` hooks (there is no model request to inspect: the policy acts on tokens) and
``steer``/``send`` (mid-turn user messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import TraceTask

__all__ = ["CLOSE", "Bridge", "Conversation", "EpisodeDriver", "AgentgymSeat"]

CLOSE = object()  # agentgym's episode ended without an answer (truncated, reset, closed)


class Conversation:
    """The seat's live ``vf.Trace``: the messages verifiers' interception would have recorded."""

    def __init__(self, task: Any, seat: str) -> None:
        self.task = task
        self.trace = vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                              agent=vf.AgentInfo(config=vf.AgentConfig(), name=seat))
        self._calls = 0
        if task.data.system_prompt:
            self.add(vf.SystemMessage(content=task.data.system_prompt))
        if task.data.prompt is not None:
            self.add_user(task.data.prompt)

    def add(self, message: Any, *, sampled: bool = False) -> None:
        nodes = self.trace.nodes
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=message, sampled=sampled))

    def add_user(self, message: str | list[Any]) -> None:
        if isinstance(message, str):
            self.add(vf.UserMessage(content=message))
        else:
            for m in message:
                self.add(vf.UserMessage(content=m["content"]) if isinstance(m, dict) else m)

    def add_call(self, name: str, arguments: dict[str, Any], result: Any) -> None:
        """A tool call the policy made and its result (agentgym ran the tool)."""
        self._calls += 1
        call_id = f"call_{self._calls}"
        self.add(vf.AssistantMessage(tool_calls=[vf.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))]),
                 sampled=True)
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        self.add(vf.ToolMessage(tool_call_id=call_id, content=text, name=name))

    def add_answer(self, answer: str) -> None:
        self.add(vf.AssistantMessage(content=answer), sampled=True)

    async def close(self, condition: str) -> vf.Trace:
        """End the exchange and score it with the task's own rewards (verifiers' ``Task.score``)."""
        trace = self.trace
        trace.stop(condition)
        try:
            await self.task.score(trace)
        except Exception as e:  # the source's scoring failed: recorded as verifiers records it
            trace.errors.append(vf.Error(type=type(e).__name__, message=str(e)))
        trace.ok = not trace.errors
        return trace


class Bridge:
    """The hand-off between agentgym's ``step`` (the caller's thread) and the env's ``run`` (the
    driver's): ``to_policy`` carries ``("turn", conversation, text)``, ``("done", episode)`` or
    ``("error", message)``; ``to_env`` carries the policy's answer or :data:`CLOSE`."""

    def __init__(self) -> None:
        self.to_policy: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.to_env: queue.Queue[Any] = queue.Queue()


class Chat:
    """verifiers' ``Interaction`` contract (``turn``, ``trace``) for the policy's seat."""

    def __init__(self, conv: Conversation, bridge: Bridge) -> None:
        self.conv, self.bridge = conv, bridge
        self._started = self._over = False

    @property
    def trace(self) -> vf.Trace:
        return self.conv.trace

    async def turn(self, message: Any = None) -> vf.Segment:
        from verifiers.v1.session import call_hook, hook_boundary

        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self._started and self.conv.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: a bare turn() takes a prompted task's opening reply; "
                             "this exchange takes its next user message")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn() "
                             "before answering")
        self._started = True
        for stop in self.conv.task.hooks("stop"):
            if hook_boundary(stop, allow_trace=True) is vf.Trace and await call_hook(stop, {vf.Trace: self.trace}):
                self.trace.stop(stop.__name__)
                self._over = True
                return vf.Segment(messages=[], terminated=True)
        if message is not None:
            self.conv.add_user(message)
        text = self.conv.task.data.prompt_text if message is None else _text(message)
        before = len(self.trace.nodes)
        self.bridge.to_policy.put(("turn", self.conv, text))
        answer = await asyncio.to_thread(self.bridge.to_env.get)
        if answer is CLOSE:
            self.bridge.to_env.put(CLOSE)  # for any other turn still to come
            self._over = True
            return vf.Segment(messages=[], terminated=True)
        new = [n.message for n in self.trace.nodes[before:] if n.sampled or n.message.role == "tool"]
        return vf.Segment(messages=new)


def _text(message: Any) -> str:
    if isinstance(message, str):
        return message
    parts = [m.get("content") if isinstance(m, dict) else getattr(m, "content", "") for m in message]
    return "\n\n".join(p if isinstance(p, str) else "" for p in parts)


class AgentgymSeat:
    """The seat agentgym's policy plays, where the env's ``run`` expects a verifiers ``Agent``."""

    trainable = True

    def __init__(self, name: str, bridge: Bridge, completed: list[Any]) -> None:
        self.name, self.bridge, self.completed = name, bridge, completed

    @contextlib.asynccontextmanager
    async def interaction(self, task: Any, **_: Any) -> AsyncIterator[Chat]:
        chat = Chat(Conversation(task, self.name), self.bridge)
        try:
            yield chat
        finally:
            self.completed.append(await chat.conv.close("user_closed"))

    async def run(self, task: Any, **_: Any) -> vf.Trace:
        """One segment: the task's prompt, the policy's answer (``Agent.run``)."""
        chat = Chat(Conversation(task, self.name), self.bridge)
        await chat.turn()
        trace = await chat.conv.close("agent_completed")
        self.completed.append(trace)
        return trace


class EpisodeDriver:
    """One verifiers episode of ``env`` on ``task`` in a thread: ``setup``, ``run``, ``finalize``,
    with ``seat`` played through ``bridge`` and the env's other seats by verifiers' own agents
    (reaching the model endpoint of ``ctx``)."""

    def __init__(self, env: Any, task: Any, seat: str, ctx: Any) -> None:
        self.env, self.task, self.seat, self.ctx = env, task, seat, ctx
        self.bridge = Bridge()
        self.thread = threading.Thread(target=self._main, name="agentgym-verifiers-episode", daemon=True)

    def start(self) -> EpisodeDriver:
        self.thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Release a seat still waiting for an answer, and let the episode finish."""
        if self.thread.is_alive():
            self.bridge.to_env.put(CLOSE)
            self.thread.join(timeout)

    def _main(self) -> None:
        try:
            episode = asyncio.run(self._episode())
        except BaseException as e:  # the source env's failure: handed to agentgym as such
            self.bridge.to_policy.put(("error", f"{type(e).__name__}: {e}", None))
        else:
            self.bridge.to_policy.put(("done", episode, None))

    async def _episode(self) -> Any:
        from verifiers.v1.configs.agent import agent_config_fields
        from verifiers.v1.episode import EnvInfo

        env, task = self.env, self.task
        episode = vf.Episode(env=EnvInfo(id=env.config.env_id),
                             task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash))
        seat = AgentgymSeat(self.seat, self.bridge, episode.traces)
        others = [n for n in agent_config_fields(env.config) if n != self.seat]
        async with env.serving() if others else contextlib.nullcontext():
            if others:
                # The env's own episode agents, with the policy's seat put in place of its own
                # (verifiers 0.4, pinned: Env._episode_agents and the Agents' table are the coupling).
                agents = env._episode_agents(self.ctx, episode.traces, None, None)
                agents._agents[self.seat] = seat
            else:
                agents = vf.Agents(env.config, lambda name, spec: seat)
            await env.setup(agents)
            await env.run(task, agents)
            await env.finalize(task, episode)
        episode.ok = all(t.ok for t in episode.traces)
        return episode
