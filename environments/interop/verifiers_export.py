"""agentgym's environments as a verifiers (v1) environment, run by verifiers' own eval code.

    vf-eval agentgym-verifiers --env.taskset.env agentgym/MathCalc-v1 -n 8 -m agentgym \\
        --client.base-url http://127.0.0.1:8000/v1 --client.api-key-var NO_KEY --no-push

verifiers finds a taskset by a top-level module name: ``agentgym-verifiers`` is the module
``agentgym_verifiers``, which re-exports this module's plugin classes. What verifiers gets:

* :class:`AgentGymTaskset`: task ``k`` of any registered agentgym env (``env``, ``env_kwargs``)
  is the env reset with ``seed + k`` and the reset ``options``; the env's instructions are the
  system prompt and its task the prompt. The task data carries the env id, kwargs, seed and
  options, so every process rebuilds the same episode from it.
* :class:`AgentGymTask`: its tools are the env's own (:mod:`.verifiers_tools`, a task-scoped MCP
  server whose tools carry the env's exact JSON schemas and step a live env reset to the task);
  its reward ``agentgym`` is agentgym's own verdict: a fresh env, reset to the task, replays the
  trace's assistant turns (each tool call, then the answer) through :class:`~agentgym.ChatWrapper`
  and pays what agentgym pays for that episode. Metrics: the episode's reward components
  (``agentgym/<name>``), its turns, and ``agentgym/tool_mismatch``: tool results that differ between
  the live run and the replay (a tool that is not a function of the episode's actions). A
  ``@vf.stop`` ends the rollout at the env's ``max_turns``, where agentgym truncates.
* :class:`AgentGymEnv`: the ``agent`` seat defaults to verifiers' ``null`` harness (its own chat
  loop; the model gets the env's tools over MCP and no shell) on the ``subprocess`` runtime. An
  agentgym env whose user answers a final answer (``final_ends_episode = False``) is played as
  verifiers plays a user: the env's reply is the next user turn.

verifiers runs the null harness's chat loop as a PEP 723 script that ``uv`` installs. Offline,
uv installs it from a local wheelhouse (:func:`build_wheelhouse`, built at setup time:
``python -m agentgym.environments.interop.verifiers_export --wheelhouse``); :func:`offline_uv_env`
is the harness environment that points uv at it, and is the seat's default.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from agentgym.environments.interop.base import require

require("verifiers.v1", "verifiers")

import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.runtimes import SubprocessConfig  # noqa: E402

__all__ = ["AgentGymData", "AgentGymEnv", "AgentGymEnvConfig", "AgentGymTask", "AgentGymTaskset",
           "AgentGymTasksetConfig", "Replay", "build_wheelhouse", "offline_uv_env", "replay"]

WHEELHOUSE_ENV = "AGENTGYM_VERIFIERS_WHEELS"


# ---------------------------------------------------------------------------- uv, offline
def default_wheelhouse() -> Path:
    """Where :func:`build_wheelhouse` puts the chat program's wheels: ``$AGENTGYM_VERIFIERS_WHEELS``,
    else ``<venv>/share/agentgym/verifiers-wheels``."""
    return Path(os.environ.get(WHEELHOUSE_ENV) or Path(sys.prefix) / "share" / "agentgym" / "verifiers-wheels")


def _chat_program_requirements() -> list[str]:
    """The PEP 723 ``dependencies`` of verifiers' chat program (the null and bash harnesses')."""
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM

    match = re.search(r"^# dependencies = (\[.*\])$", CHAT_PROGRAM, re.M)
    if match is None:
        raise RuntimeError("verifiers' chat program declares no '# dependencies = [...]' line")
    return list(json.loads(match.group(1)))


def build_wheelhouse(dest: str | Path | None = None) -> Path:
    """Download the wheels of verifiers' chat program into ``dest`` with pip (at setup time),
    pinned to the versions installed here, so uv can install the program with no index."""
    from importlib.metadata import distributions

    out = Path(dest) if dest is not None else default_wheelhouse()
    out.mkdir(parents=True, exist_ok=True)
    pins = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions()
                   if d.metadata["Name"] and "+" not in d.version})
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(pins) + "\n")
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-c", f.name,
                        "-d", str(out), *_chat_program_requirements()], check=True)
    finally:
        os.unlink(f.name)
    return out


def offline_uv_env(wheelhouse: str | Path | None = None) -> dict[str, str]:
    """A harness ``env`` under which verifiers' ``uv sync --script`` installs the chat program from
    the local wheelhouse with no index, on this interpreter, with the ``uv`` of this environment.
    Empty (uv reaches PyPI, as verifiers does by default) when no wheelhouse was built."""
    wheels = Path(wheelhouse) if wheelhouse is not None else default_wheelhouse()
    env: dict[str, str] = {}
    try:
        import uv

        env["PATH"] = f"{Path(uv.find_uv_bin()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    except (ImportError, FileNotFoundError):
        pass  # verifiers installs uv itself (from PyPI)
    if wheels.is_dir() and any(wheels.glob("*.whl")):
        env.update(UV_NO_INDEX="1", UV_FIND_LINKS=str(wheels), UV_PYTHON=sys.executable,
                   UV_PYTHON_DOWNLOADS="never")
    return env


# ---------------------------------------------------------------------------- taskset and task
class AgentGymData(vf.TaskData):
    """One agentgym episode's start: everything a process needs to rebuild it."""

    env: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int
    options: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = 8
    multi_turn: bool = False  # the env's user answers a final answer


def _check_env_id(env_id: str) -> str:
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)

    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        raise ValueError(f"unknown agentgym environment {env_id!r}"
                         + (f"; did you mean {' or '.join(map(repr, close))}?" if close else
                            f"; registered: {sorted(k for k in gym.registry if k.startswith('agentgym/'))}"))
    return env_id


class AgentGymTasksetConfig(vf.TasksetConfig):
    env: str = "agentgym/Math-v1"
    """A registered agentgym environment id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of ``gym.make`` (e.g. ``reward_mode``, ``max_turns``)."""
    seed: int = 0
    """Task ``k`` is the env reset with ``seed + k``."""
    num_tasks: int = Field(100, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)
    """The env's reset options (e.g. ``{"split": "test"}``)."""

    @field_validator("env")
    @classmethod
    def _known(cls, v: str) -> str:
        return _check_env_id(v)


def _make(data: AgentGymData) -> Any:
    import gymnasium as gym

    import agentgym

    return agentgym.ChatWrapper(gym.make(data.env, **data.env_kwargs))


@dataclass
class Replay:
    """agentgym's verdict on a conversation: the episode it replays to."""

    reward: float = 0.0  # the total agentgym pays for the episode
    components: dict[str, float] = field(default_factory=dict)  # summed over the turns
    turns: int = 0
    done: bool = False  # terminated or truncated
    tool_mismatch: int = 0  # tool results that differ from the conversation's
    user_reply: str | None = None  # the env's user message after the last answer, if it goes on


def _calls(message: Any) -> list[dict[str, Any]]:
    """One agentgym action per tool call (Harmony runs one call per turn; the harness ran them all)."""
    calls = message.tool_calls or []
    head: dict[str, Any] = {"role": "assistant", "content": message.content,
                            "reasoning_content": message.reasoning_content}
    if not calls:
        return [head]
    return [{**(head if i == 0 else {"role": "assistant", "content": None}),
             "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]}
            for i, c in enumerate(calls)]


def replay(data: AgentGymData, messages: list[Any]) -> Replay:
    """Replay a verifiers conversation (a trace's messages) in a fresh agentgym env reset to the task."""
    seen = {m.tool_call_id: vf_text(m.content) for m in messages if m.role == "tool"}
    out = Replay()
    env = _make(data)
    try:
        env.reset(seed=data.seed, options=data.options or None)
        for m in messages:
            if m.role != "assistant":
                continue
            for action in _calls(m):
                if out.done:
                    return out
                new, reward, term, trunc, info = env.step(action)
                out.reward += reward
                out.turns += 1
                out.done = term or trunc
                for k, v in info["reward_components"].items():
                    out.components[k] = out.components.get(k, 0.0) + v
                call_id = action["tool_calls"][0]["id"] if action.get("tool_calls") else None
                text = "\n".join(str(n["content"]) for n in new)
                if call_id is not None and call_id in seen and seen[call_id].strip() != text.strip():
                    out.tool_mismatch += 1
                out.user_reply = text if call_id is None and not out.done and text else None
        return out
    finally:
        env.close()


def vf_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(p, "text", "") or "" for p in content or [])


class AgentGymTaskConfig(vf.TaskConfig):
    tools: bool = True
    """Serve the env's tools (the taskset sets False for an env class that has none)."""


class AgentGymTask(vf.Task[AgentGymData, vf.State, AgentGymTaskConfig]):
    @vf.reward
    async def agentgym(self, trace: vf.Trace) -> float:
        r = await asyncio.to_thread(replay, self.data, list(trace.messages))
        trace.record_metrics({f"agentgym/{k}": v for k, v in r.components.items()})
        trace.record_metrics({"agentgym/turns": float(r.turns), "agentgym/tool_mismatch": float(r.tool_mismatch)})
        return r.reward

    @vf.stop
    async def agentgym_max_turns(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= self.data.max_turns

    @classmethod
    def toolsets(cls, config: AgentGymTaskConfig) -> list[vf.Toolset]:
        if not getattr(config, "tools", True):
            return []
        from agentgym.environments.interop.verifiers_tools import AgentGymTools

        return [AgentGymTools(vf.ToolsetConfig())]


class AgentGymTaskset(vf.Taskset[AgentGymTask, AgentGymTasksetConfig]):
    def load(self) -> Iterator[AgentGymTask]:
        import gymnasium as gym

        from agentgym.env import ToolEnv

        c = self.config
        env = gym.make(c.env, **c.env_kwargs)
        u: Any = env.unwrapped
        task_config = AgentGymTaskConfig.model_validate(
            {**c.task.model_dump(), "tools": type(u).tools is not ToolEnv.tools})
        try:
            for k in range(c.num_tasks):
                # The task of seed + k, without reset()'s per-episode resources (a sandbox, a
                # database): ToolEnv.reset seeds np_random, then draws the task exactly so.
                gym.Env.reset(u, seed=c.seed + k)
                task = u.sample_task(u.np_random, dict(c.options))
                yield AgentGymTask(AgentGymData(
                    id=task.id, name=f"{c.env}#{c.seed + k}", prompt=task.prompt, system_prompt=u.instructions or None,
                    env=c.env, env_kwargs=c.env_kwargs, seed=c.seed + k, options=c.options, max_turns=u.max_turns,
                    multi_turn=not u.final_ends_episode), task_config)
        finally:
            env.close()


# ---------------------------------------------------------------------------- the env
class AgentGymEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null", "env": offline_uv_env()},
                                           runtime=SubprocessConfig())
    """The seat under evaluation: verifiers' null harness (chat loop + the env's MCP tools) on the
    subprocess runtime; pin another with ``--env.agent.harness.id`` / ``--env.agent.runtime.type``."""


class AgentGymEnv(vf.Env[AgentGymEnvConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        data = task.data
        if not getattr(data, "multi_turn", False):
            await agents.agent.run(task)
            return
        async with agents.agent.interaction(task) as chat:
            segment = await chat.turn()
            while not segment.terminated:
                r = await asyncio.to_thread(replay, data, list(chat.trace.messages))
                if r.done or r.user_reply is None:
                    break
                segment = await chat.turn(r.user_reply)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="agentgym for verifiers: build the offline wheelhouse of "
                                             "verifiers' chat program.")
    ap.add_argument("--wheelhouse", nargs="?", const="", metavar="DIR",
                    help=f"download the wheels (default: ${WHEELHOUSE_ENV} or <venv>/share/agentgym/verifiers-wheels)")
    args = ap.parse_args(argv)
    if args.wheelhouse is None:
        ap.print_help()
        return 2
    out = build_wheelhouse(args.wheelhouse or None)
    print(f"verifiers chat-program wheels: {out} ({len(list(out.glob('*.whl')))} wheels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
