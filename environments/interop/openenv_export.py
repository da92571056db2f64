"""An agentgym environment as an OpenEnv environment server (OpenEnv's own ``create_app``).

    python -m agentgym.environments.interop.openenv_export agentgym/Math-v1 --port 8800

OpenEnv's clients then drive it like any OpenEnv env (``GenericEnvClient``, or the typed
``AgentGymEnvClient`` below)::

    with GenericEnvClient(base_url="http://127.0.0.1:8800").sync() as env:
        r = env.reset(seed=0)                        # r.observation["text"]: the task
        r = env.step({"answer": "42"})               # r.reward, r.done
        r = env.step({"tool": "calculator", "arguments": {"expression": "6*7"}})

An action is a tool call (``tool`` + ``arguments``) or a final answer (``answer``). agentgym
renders it into the exact Harmony tokens a policy would sample and steps the token env, so the
episode's trajectory is agentgym's own record. ``reset`` takes ``seed`` and the env's reset
options as keyword arguments (``index``, ``split``, ...). The observation's ``text`` is the task
(after reset), the tool's result, or the user's reply; ``tools`` lists the episode's tool
schemas; ``info`` carries the reward components and errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import Field

from agentgym.environments.interop.base import require

require("openenv.core", "openenv-core")

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402

__all__ = ["AgentGymAction", "AgentGymEnvClient", "AgentGymEnvironment", "AgentGymObservation", "make_app"]

READY_PREFIX = "agentgym-openenv ready"


class AgentGymAction(Action):
    """A tool call (``tool`` and ``arguments``) or a final answer (``answer``)."""

    tool: str | None = Field(default=None, description="name of the tool to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's JSON arguments")
    answer: str | None = Field(default=None, description="the final answer (ends the episode)")


class AgentGymObservation(Observation):
    text: str = Field(default="", description="the task, a tool's result, or the user's reply")
    instructions: str = Field(default="", description="the env's instructions (after reset)")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="tool schemas (after reset)")
    task_id: str = Field(default="", description="the task's stable id")
    info: dict[str, Any] = Field(default_factory=dict, description="reward components, errors")


class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True  # one agentgym env per session, nothing shared

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the ids)

        super().__init__()
        self.env = gym.make(env_id, **env_kwargs)
        self.env_id = env_id
        self._state = State(step_count=0)

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> AgentGymObservation:
        _, info = self.env.reset(seed=seed, options=options or None)
        self._state = State(episode_id=episode_id or info["task_id"], step_count=0)
        u = self.unwrapped
        return AgentGymObservation(text=info["prompt"], instructions=u.instructions, task_id=info["task_id"],
                                   tools=[t.schema for t in u.episode_tools], reward=0.0, done=False)

    def step(self, action: AgentGymAction, timeout_s: float | None = None, **_: Any) -> AgentGymObservation:
        codec = self.unwrapped.codec
        if action.answer is not None:
            ids = codec.final_ids(action.answer)
        elif action.tool:
            ids = codec.tool_call_ids(action.tool, action.arguments)
        else:
            ids = codec.final_ids("")  # neither: an empty answer, scored as the env scores one
        _, reward, terminated, truncated, info = self.env.step(ids)
        self._state.step_count += 1
        result = info.get("tool_result") or {}
        text = result.get("content") or info.get("error") or ""
        keep = {k: info[k] for k in ("reward_components", "error", "infra_error", "counts") if k in info}
        return AgentGymObservation(text=str(text), reward=float(reward), done=bool(terminated or truncated),
                                   task_id=self._state.episode_id or "", info=keep)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self.env.close()


class AgentGymEnvClient(EnvClient[AgentGymAction, AgentGymObservation, State]):
    """OpenEnv's typed client for an exported agentgym env."""

    def _step_payload(self, action: AgentGymAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentGymObservation]:
        obs = AgentGymObservation(**{**payload.get("observation", {}), "reward": payload.get("reward"),
                                     "done": payload.get("done", False)})
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


def make_app(env_id: str, *, max_concurrent_envs: int = 64, **env_kwargs: Any) -> Any:
    """OpenEnv's FastAPI app serving ``env_id`` (one agentgym env per WebSocket session)."""
    from openenv.core.env_server.http_server import create_app

    return create_app(lambda: AgentGymEnvironment(env_id, **env_kwargs), AgentGymAction, AgentGymObservation,
                      env_name=env_id.replace("/", "_"), max_concurrent_envs=max_concurrent_envs)


def main(argv: list[str] | None = None) -> int:
    import asyncio
    import socket

    import uvicorn

    ap = argparse.ArgumentParser(description="Serve an agentgym env as an OpenEnv environment server.")
    ap.add_argument("env_id")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON")
    args = ap.parse_args(argv)
    kwargs = {k: json.loads(v) for k, _, v in (kv.partition("=") for kv in args.env_kwarg)}
    app = make_app(args.env_id, **kwargs)
    sock = socket.socket()
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    async def serve() -> None:
        # The ready line once uvicorn serves and holds Ctrl-C (its signal handlers are in place):
        # a Ctrl-C any earlier can land inside its setup (its logging config) and leave a traceback.
        running = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not (server.started or running.done()):
            await asyncio.sleep(0.01)
        if server.started:
            print(f"{READY_PREFIX} url=http://{args.host}:{port}", flush=True)
        await running

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    from agentgym.cli import guarded

    # Ctrl-C: uvicorn stops the server, then raises the signal again; one line, exit 130, no traceback
    sys.exit(guarded("python -m agentgym.environments.interop.openenv_export", main))
