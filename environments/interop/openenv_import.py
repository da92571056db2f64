"""``agentgym/OpenEnv-v0``: an OpenEnv environment server, driven through OpenEnv's own client.

    # a server already running (started from its package on loopback):
    env = gym.make("agentgym/OpenEnv-v0", url="http://127.0.0.1:8000")
    # or started here, from a command that prints "url=http://HOST:PORT" when bound:
    env = gym.make("agentgym/OpenEnv-v0", command=[...])

The env's action schema (``GET /schema``) becomes one Harmony tool (``tool_name``, default
``step``) whose arguments are the action's fields; calling it is ``client.step(arguments)``
through OpenEnv's ``GenericEnvClient`` over its WebSocket session, and the observation comes back
as the tool's result (JSON, without ``reward``/``done``). ``reset`` calls ``client.reset(seed=...,
**options)``; the reset observation is the user's task. A final-channel answer becomes the action
``{final_field: answer}`` when ``final_field`` is set (an env whose actions carry an answer),
else it ends the episode with outcome 0 (OpenEnv has no final answer; act through the tool).

Rewards: the reward of the step that reports ``done`` is the outcome; earlier steps' rewards are
the shaped term ``step_reward``. A server that does not answer, or a lost session, is an
infrastructure fault (``info["infra_error"]``), never a 0. A server-side refusal of an action
(a field the schema does not have) is the tool's error, shown to the model.

Replayable only when you say so (``replayable=True``): an OpenEnv server may hold any state, and
agentgym cannot prove from the outside that the same seed and actions give the same episode.
No oracle: OpenEnv envs carry none.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
import numpy as np

from agentgym.env import Task
from agentgym.environments.interop.base import HubEnv, Provenance, require
from agentgym.environments.interop.launch import Server, start_server
from agentgym.environments.interop.reasoning_gym import _version
from agentgym.errors import ConfigError, ServiceError
from agentgym.tools import Tool, ToolResult

__all__ = ["OpenEnvEnv"]

_HIDDEN = ("reward", "done", "metadata")  # observation fields that are not the model's to read


class OpenEnvEnv(HubEnv):
    default_id = "agentgym/OpenEnv-v0"
    hub = "openenv"
    splits: ClassVar[tuple[str, ...]] = ()
    extra_shaping: ClassVar[dict[str, float]] = {"step_reward": 1.0}
    instructions = "Act in the environment by calling its tool; each result is the environment's observation."

    def __init__(self, *, url: str | None = None, command: list[str] | None = None, tool_name: str = "step",
                 final_field: str | None = None, replayable: bool = False, instructions: str | None = None,
                 split: str | None = None, timeout: float = 60.0, **kwargs: Any) -> None:
        require("openenv.core", "openenv-core")
        if (url is None) == (command is None):
            raise ConfigError("OpenEnv-v0 needs exactly one of url= (a running OpenEnv server) or command= (a "
                              "command that starts one and prints 'url=http://HOST:PORT')")
        if split is not None:
            raise ConfigError("OpenEnv servers have no splits agentgym can select; pass split-specific reset "
                              "options through the env's own reset kwargs (reset options), not split=")
        super().__init__(**kwargs)
        self._server: Server | None = start_server(list(command)) if command is not None else None
        self.url = (self._server.url if self._server is not None else str(url)).rstrip("/")
        self.tool_name, self.final_field, self.declared_replayable = tool_name, final_field, replayable
        self.timeout = timeout
        if instructions is not None:
            self.instructions = instructions  # type: ignore[misc]  # per instance
        try:
            schema = httpx.get(f"{self.url}/schema", timeout=timeout).json()
        except (httpx.HTTPError, ValueError) as e:
            self._stop()
            raise ServiceError(f"no OpenEnv server answers at {self.url}/schema ({e}); start it first") from None
        action = dict(schema.get("action") or {})
        props = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
        self.action_schema = {"type": "object", "properties": props,
                              "required": [r for r in action.get("required", []) if r in props]}
        if "$defs" in action:
            self.action_schema["$defs"] = action["$defs"]
        self.description = str(action.get("description") or action.get("title") or "Take an action in the env.")
        self.client: Any = None
        self._rewards: list[float] = []

    # ------------------------------------------------------------------ HubEnv API
    def provenance(self) -> Provenance:
        return Provenance(
            hub=f"openenv-core {_version('openenv-core')}", source=self.url, replayable=self.declared_replayable,
            replay_note="declared replayable by the user (same seed and actions, same episode)" if
            self.declared_replayable else "an OpenEnv server may hold any state; declare replayable=True only "
            "for a server known to be deterministic given the seed",
            oracle=False, oracle_note="OpenEnv environments carry no oracle")

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        # The server's own seed: derived from the episode's rng, so a seeded reset is reproducible.
        seed = int(rng.integers(2**31))
        self._rewards = []
        try:
            client = self._client()
            result = client.reset(seed=seed, **options)
        except RuntimeError as e:  # the server refused the reset options: the caller's mistake
            raise ConfigError(f"the OpenEnv server at {self.url} refused reset(seed, **{options}): {e}") from None
        except Exception as e:
            self._drop_client()
            raise ServiceError(f"the OpenEnv server at {self.url} did not answer reset: {type(e).__name__}: {e}") from e
        return Task(id=f"openenv/{seed}", prompt=_render(result.observation), meta={"server_seed": seed})

    def tools(self) -> list[Tool]:
        return [Tool(self.tool_name, self.description, json.loads(json.dumps(self.action_schema)), self._step)]

    def score_source(self, answer: str) -> ToolResult:
        if self.final_field is None:
            return ToolResult("OpenEnv environments take actions through the tool, not a final answer: the "
                              "episode ends with outcome 0", terminal=True, outcome=0.0)
        result = self._step(**{self.final_field: answer})
        if result.error == "infra_error" or result.terminal:
            return result
        return ToolResult(result.content, terminal=True, outcome=0.0, components=result.components)

    def on_close(self) -> None:
        self._drop_client()
        self._stop()

    # ------------------------------------------------------------------ internals
    def _step(self, **action: Any) -> ToolResult:
        try:
            result = self._client().step(action)
        except RuntimeError as e:  # the server's error message: the action was refused
            return ToolResult.failure("action_refused", str(e)[:2000])
        except Exception as e:  # connection lost, timeout: not the policy's doing
            self._drop_client()
            return self.infra_fault(f"OpenEnv server {self.url}: {type(e).__name__}: {e}")
        reward = float(result.reward or 0.0)
        if result.done:
            return ToolResult(_render(result.observation), terminal=True, outcome=reward)
        return ToolResult(_render(result.observation), components={"step_reward": reward})

    def _client(self) -> Any:
        if self.client is None:
            from openenv.core.generic_client import GenericEnvClient

            self.client = GenericEnvClient(base_url=self.url, message_timeout_s=self.timeout).sync()
            self.client.connect()
        return self.client

    def _drop_client(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # a dead connection cannot be closed cleanly; it is dropped either way
                pass
            self.client = None

    def _stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def _render(observation: Any) -> str:
    obs = observation if isinstance(observation, dict) else dict(observation or {})
    shown = {k: v for k, v in obs.items() if k not in _HIDDEN}
    if isinstance(shown.get("text"), str) and "task_id" in shown:  # an exported agentgym env: its message
        return str(shown["text"])
    return json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str)
