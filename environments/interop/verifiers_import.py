"""``agentgym/Verifiers-v0``: a verifiers (v1) taskset or environment as a token env, scored by its own rubric.

    env = gym.make("agentgym/Verifiers-v0", taskset=my_taskset)           # a vf.Taskset object
    env = gym.make("agentgym/Verifiers-v0", taskset="reverse_text",       # an installed package
                   taskset_config={...})
    env = gym.make("agentgym/Verifiers-v0", taskset_factory="pkg.mod:make")  # what a suite file names
    env = gym.make("agentgym/Verifiers-v0", env=my_vf_env)                # a multi-turn vf.Env object
    env = gym.make("agentgym/Verifiers-v0", env="user-sim",               # an installed env id
                   env_config={"taskset": {"id": "my_taskset"}, "user": {...}},
                   agents_endpoint={"base_url": "http://127.0.0.1:8000/v1", "model": "agentgym"})

**Single-turn and tool tasksets.** One task per episode (reset option ``index``, else drawn from
the seed; an infinite taskset is read up to ``max_tasks``). The task's ``system_prompt`` is the
developer instructions and its prompt the user message. Tools: every ``@vf.tool`` method of the
taskset's and the task's ``vf.Toolset`` s becomes a Harmony tool with the method's signature as
its JSON schema, and is called in process (verifiers would serve them over MCP to a harness). The
episode is recorded as a ``vf.Trace`` (the conversation as verifiers records it, tool calls and
results included) and the task's own ``score`` runs on the final answer, in a fresh child of a
scorer worker (:mod:`.isolation`; ``score_timeout`` seconds), not in agentgym's process, unless the
task asks an LLM judge (network) or cannot be pickled (then in process): every ``@vf.reward``
(and plugged reward or judge) lands in ``trace.rewards``; the outcome is verifiers' weighted sum
(``trace.reward``) and each component is reported as ``vf:NAME`` (weight 0 in shaped mode:
reported, not paid twice). Rewards that need a runtime (a sandbox) are skipped by verifiers when
scoring without one.

**Multi-turn environments** (``env=``): verifiers 0.4 writes them as a ``vf.Env`` whose
``run(task, agents)`` drives its seats through ``interaction().turn(message)``: the env's code
plays the user (a game engine, a checker), or another seat does (``user-sim``: an LLM user).
The env's ``setup``/``run``/``finalize`` run for real (:mod:`.verifiers_episode`); the policy plays
one seat (``seat``, default the env's first): each message the env sends it is the next user
message of the token episode, each final answer goes back as the seat's reply. The other seats are
verifiers' own agents (their harness and runtime from ``env_config``) on ``agents_endpoint``. When
the env's ``run`` ends, the outcome is the seat's ``trace.reward``: its task's rewards plus what
``run``/``finalize`` recorded. An env that fails, or gives the policy no turn, is an
infrastructure fault (the episode is void), not a 0.

Replayable (tasksets) when the task's scoring needs neither a runtime nor a judge (pure functions
of the trace). A ``vf.Env`` runs code agentgym cannot inspect: replayable only when declared
(``replayable=True``) and played by the policy alone; with an LLM seat, never. The oracle answers
``task.data.answer`` where the task data has one (a taskset whose rubric wants another form, tags
for instance, will fail the oracle check: validate shows it).
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import inspect
import json
import queue
import typing
from typing import Any, ClassVar

import numpy as np

from agentgym.env import Task
from agentgym.environments.interop.base import HubEnv, Provenance, pick_index, require
from agentgym.environments.interop.isolation import (
    IsolatedScorer,
    ScorerFault,
    SessionError,
    release_scorer,
    shared_scorer,
)
from agentgym.environments.interop.reasoning_gym import _version
from agentgym.errors import ConfigError
from agentgym.tools import Tool, ToolResult

__all__ = ["VerifiersEnv"]

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _factory(ref: str, kwargs: dict[str, Any] | None) -> Any:
    """``"module:function"`` called with ``kwargs``: how a suite file names an object."""
    module, _, fn = ref.partition(":")
    return getattr(importlib.import_module(module), fn)(**(kwargs or {}))


class VerifiersEnv(HubEnv):
    default_id = "agentgym/Verifiers-v0"
    hub = "verifiers"
    splits: ClassVar[tuple[str, ...]] = ()
    instructions = "Answer in the final channel."

    def __init__(self, *, taskset: Any = None, taskset_config: dict[str, Any] | None = None,
                 taskset_factory: str | None = None, env: Any = None, env_config: dict[str, Any] | None = None,
                 env_factory: str | None = None, seat: str | None = None,
                 agents_endpoint: dict[str, Any] | None = None, replayable: bool = False,
                 turn_timeout: float = 600.0, max_tasks: int = 1000, split: str | None = None,
                 score_timeout: float = 60.0, **kwargs: Any) -> None:
        vf = require("verifiers.v1", "verifiers")
        if split is not None:
            raise ConfigError("verifiers tasksets choose their split in their own config (e.g. dataset_split): pass "
                              "it in taskset_config=, not split=")
        if env_factory is not None:
            env = _factory(env_factory, env_config)
        elif isinstance(env, str):
            from verifiers.v1.utils.loaders import load_environment, resolve_env_config

            config = {"taskset": {"id": env}, **(env_config or {}), "id": env}  # a package may bundle both
            env = load_environment(resolve_env_config(config))
        if env is not None:
            if not isinstance(env, vf.Env):
                raise ConfigError(f"env must be a verifiers.v1.Env, an installed env id or env_factory=, got {env!r:.100}")
            if taskset is not None or taskset_factory is not None:
                raise ConfigError("pass a taskset or an env, not both: the env brings its own taskset "
                                  "(env_config={'taskset': {'id': ...}})")
            taskset = env.taskset
        elif taskset_factory is not None:
            taskset = _factory(taskset_factory, taskset_config)
        if isinstance(taskset, str):
            from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

            cfg = taskset_config_type(taskset).model_validate({"id": taskset, **(taskset_config or {})})
            taskset = taskset_class(taskset)(cfg)
        if not isinstance(taskset, vf.Taskset):
            raise ConfigError(f"taskset must be a verifiers.v1.Taskset or an installed taskset id, got {taskset!r:.100}")
        super().__init__(**kwargs)
        self.taskset, self.vf_env = taskset, env
        view = taskset if taskset.bounded else taskset.take(max_tasks)
        self.tasks: list[Any] = list(view)
        if not self.tasks:
            raise ConfigError(f"the taskset {type(taskset).__name__} yielded no task")
        self.vtask: Any = None  # the seed task of the episode
        self.conv: Any = None  # the policy's live conversation (verifiers_episode.Conversation)
        self.driver: Any = None  # a vf.Env's episode (verifiers_episode.EpisodeDriver)
        self.turn_timeout = float(turn_timeout)
        self.score_timeout = float(score_timeout)
        self._scorer: IsolatedScorer | None = None  # the scorer worker, started at the first answer
        self._toolsets = list(type(taskset).toolsets(taskset.config))
        self.seat: str = "agent"  # the seat the policy plays
        self.others: list[str] = []  # the env's other seats, played by verifiers' agents
        self.ctx: Any = None  # their model endpoint (a verifiers ModelContext)
        if env is not None:
            self.final_ends_episode = False  # type: ignore[misc]  # per instance; the env answers a final answer (or ends the episode)
            self.seat, self.others = self._seats(env, seat)
            self.ctx = self._endpoint(agents_endpoint) if self.others else None
            self.vf_env = env = _local_seat(env, self.seat)
        self._replayable, self._why = self._replay_check(replayable)

    # ------------------------------------------------------------------ HubEnv API
    def provenance(self) -> Provenance:
        has_answer = all(isinstance(getattr(t.data, "answer", None), (str, int, float)) for t in self.tasks[:8])
        source = type(self.taskset).__name__
        if self.vf_env is not None:
            source = f"{type(self.vf_env).__name__}({source}), seat {self.seat!r}"
        return Provenance(
            hub=f"verifiers {_version('verifiers')}", source=source,
            replayable=self._replayable, replay_note=self._why, oracle=has_answer,
            oracle_note="the task data's answer field" if has_answer else "the task data has no answer field")

    def oracle_action(self) -> list[int]:
        answer = getattr(self.vtask.data, "answer", None) if self.vtask is not None else None
        if answer is None:
            return super().oracle_action()
        return self.codec.final_ids(str(answer))

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        from agentgym.environments.interop.verifiers_episode import Conversation, EpisodeDriver

        index = pick_index(options, rng, len(self.tasks))
        self._end_episode()
        self.vtask = t = self.tasks[int(index)]
        if self.vf_env is None:
            self.conv = Conversation(t, self.seat)
            prompt = t.data.prompt_text
        else:
            self.driver = EpisodeDriver(self.vf_env, t, self.seat, self.ctx).start()
            kind, conv, prompt = self._next_event()
            if kind != "turn":
                raise ConfigError(f"the verifiers env {type(self.vf_env).__name__} gave seat {self.seat!r} no turn "
                                  f"on task {index}: {conv if kind == 'error' else 'its run() ended first'}")
            self.conv = conv
        data = self.conv.task.data
        self.instructions = data.system_prompt or type(self).instructions  # type: ignore[misc]  # per task
        return Task(id=str(t.data.id or t.key[:16]), prompt=prompt, meta={"index": int(index)})

    def tools(self) -> list[Tool]:
        out = []
        task = self.conv.task if self.conv is not None else self.vtask
        shared = self._toolsets if task is None or isinstance(task, type(self.taskset).task_type()) else []
        task_sets = type(task).toolsets(task.config) if task is not None else []
        for toolset in [*shared, *task_sets]:
            for fn in _tool_methods(toolset):
                name = getattr(fn, "tool_name", None) or fn.__name__
                out.append(Tool(name, inspect.getdoc(fn) or fn.__name__, _schema(fn), self._recorded(name, _sync(fn))))
        return out

    def score_source(self, answer: str) -> ToolResult:
        conv = self.conv
        conv.add_answer(answer)
        if self.driver is None:
            try:
                scored = self._score_isolated(conv)
            except ScorerFault as e:
                return self.infra_fault(str(e))
            if isinstance(scored, ToolResult):
                return scored
            if scored is None:  # not isolable (an LLM judge, a task that cannot be pickled): in process
                trace = _run(conv.close("agent_completed"))
                if trace.errors:  # verifiers' scoring raised (a TaskError): the source's bug, reported
                    return self.infra_fault(f"verifiers scoring raised {trace.errors[-1].type}: "
                                            f"{trace.errors[-1].message}")
                reward = float(trace.reward)
                comps = {f"vf:{k}": float(r.score) for k, r in trace.rewards.items() if r is not None}
            else:
                reward, comps = scored
            return self._scored(reward, comps)
        else:
            self.driver.bridge.to_env.put(answer)
            kind, payload, text = self._next_event()
            if kind == "turn":  # the env (or its user) answers: the user's next message
                self.conv = payload
                return ToolResult(text)
            if kind == "error":
                return self.infra_fault(f"the verifiers env failed: {payload}")
            self.driver = None
            trace = next((t for t in payload.traces if t is conv.trace), conv.trace)
        return self._scored(float(trace.reward), {f"vf:{k}": float(r.score) for k, r in trace.rewards.items()
                                                  if r is not None})

    def _scored(self, reward: float, comps: dict[str, float]) -> ToolResult:
        for k in comps:
            self.shaping.setdefault(k, 0.0)
        detail = ", ".join(f"{k}={v:g}" for k, v in comps.items()) or "no reward ran"
        return ToolResult(f"verifiers reward {reward:g} ({detail})", terminal=True, outcome=reward, components=comps)

    def _score_isolated(self, conv: Any) -> tuple[float, dict[str, float]] | ToolResult | None:
        """The task's own ``score`` over the finished trace, in a fresh child of a scorer worker
        (:mod:`.isolation`); None where it cannot run there (an LLM judge needs the network; a task
        that does not pickle cannot be sent)."""
        import sys

        from agentgym.environments.interop.hub_scorers import pack

        task = conv.task
        if task.plugged_judges():
            return None
        try:
            packed = pack(task)
        except Exception:  # a task holding a lambda, a client, a lock: scored in process
            return None
        conv.trace.stop("agent_completed")
        if self._scorer is None:
            self._scorer = shared_scorer("agentgym.environments.interop.hub_scorers:VerifiersScorer",
                                         {"sys_path": list(sys.path)}, timeout=self.score_timeout)
        try:
            (out,) = self._scorer.score(packed, [conv.trace.model_dump_json()])
        except SessionError as e:  # the rewards raised, timed out or died on this answer
            return ToolResult(f"verifiers reward 0 (the scoring failed on this answer: {e})", terminal=True,
                              outcome=0.0)
        if out.get("error"):  # verifiers' scoring raised (a TaskError): the source's bug, reported
            return self.infra_fault(f"verifiers scoring raised {out['error']}")
        import verifiers.v1 as vf

        conv.trace = vf.Trace.model_validate_json(out["trace"])  # the scored trace, as verifiers records it (data)
        return float(out["reward"]), {f"vf:{k}": float(v) for k, v in out["rewards"].items()}

    def on_close(self) -> None:
        self._end_episode()
        if self._scorer is not None:
            release_scorer(self._scorer)
            self._scorer = None

    # ------------------------------------------------------------------ internals
    def _next_event(self) -> tuple[str, Any, Any]:
        try:
            return self.driver.bridge.to_policy.get(timeout=self.turn_timeout)
        except queue.Empty:
            return "error", f"no turn and no end within {self.turn_timeout:g}s (turn_timeout)", None

    def _end_episode(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.driver = None

    def _recorded(self, name: str, fn: Any) -> Any:
        def call(**kwargs: Any) -> Any:
            try:
                out = fn(**kwargs)
            except Exception as e:
                self.conv.add_call(name, kwargs, f"error: {type(e).__name__}: {e}")
                raise
            self.conv.add_call(name, kwargs, out)
            return out
        return call

    @staticmethod
    def _seats(env: Any, seat: str | None) -> tuple[str, list[str]]:
        from verifiers.v1.configs.agent import agent_config_fields

        names = list(agent_config_fields(env.config))
        seat = seat or names[0]
        if seat not in names:
            close = difflib.get_close_matches(seat, names, n=1)
            raise ConfigError(f"{type(env).__name__} has no seat {seat!r}"
                              + (f"; did you mean {close[0]!r}?" if close else f"; its seats: {names}"))
        return seat, [n for n in names if n != seat]

    def _endpoint(self, endpoint: dict[str, Any] | None) -> Any:
        from verifiers.v1.clients import EvalClientConfig, ModelContext
        from verifiers.v1.types import SamplingConfig

        if not endpoint or not endpoint.get("base_url") or not endpoint.get("model"):
            raise ConfigError(f"{type(self.vf_env).__name__}'s seat(s) {self.others} are played by a model: pass "
                              "agents_endpoint={'base_url': 'http://HOST:PORT/v1', 'model': NAME} (an OpenAI-"
                              "compatible endpoint; optional 'api_key_var', 'sampling')")
        unknown = set(endpoint) - {"base_url", "model", "api_key_var", "sampling"}
        if unknown:
            raise ConfigError(f"unknown agents_endpoint key(s) {sorted(unknown)}; known: base_url, model, "
                              "api_key_var, sampling")
        client = EvalClientConfig(base_url=endpoint["base_url"], api_key_var=endpoint.get("api_key_var", "NO_API_KEY"))
        return ModelContext(client=client, model=endpoint["model"], sampling=SamplingConfig(**endpoint.get("sampling", {})))

    def _replay_check(self, declared: bool) -> tuple[bool, str]:
        t = self.tasks[0]
        if t.plugged_judges():
            return False, "its rubric asks an LLM judge, whose replies may change"
        needs_runtime = [fn.__name__ for fn in t.hooks("reward")
                         if (p := inspect.signature(fn).parameters.get("runtime")) is not None
                         and p.default is inspect.Parameter.empty]
        if needs_runtime:
            return False, f"rewards {needs_runtime} need a runtime (sandbox) that agentgym does not provide"
        if self.vf_env is None:
            return True, "the tasks are the taskset's fixed data and every reward is a function of the trace"
        name = type(self.vf_env).__name__
        if self.others:
            return False, f"{name}'s seat(s) {self.others} are played by a model, whose replies may change"
        if not declared:
            return False, (f"{name}.run() is code agentgym cannot inspect; declare replayable=True if it is a "
                           "function of the task and the policy's replies")
        return True, f"declared: {name}.run() is a function of the task and the policy's replies"


def _local_seat(env: Any, seat: str) -> Any:
    """``env`` with the policy's seat declared as the tool-less ``null`` harness on the local
    runtime. The seat runs no program, but verifiers decides from every seat's runtime whether
    the episode needs a tunnel (a remote one does) and warns about a shell harness on the host."""
    from verifiers.v1.runtimes import SubprocessConfig, runtime_is_local
    from verifiers.v1.utils.loaders import harness_config_type

    spec = getattr(env.config, seat)
    if runtime_is_local(spec.runtime) and spec.harness is not None and spec.harness.id == "null":
        return env
    local = spec.model_copy(update={"runtime": SubprocessConfig(),
                                    "harness": harness_config_type("null").model_validate({"id": "null"})})
    return type(env)(env.config.model_copy(update={seat: local}))


def _tool_methods(toolset: Any) -> list[Any]:
    from verifiers.v1.utils.decorators import discover_decorated

    return list(discover_decorated(toolset, "tool"))


def _schema(fn: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(fn)
    props, required = {}, []
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self":
            continue
        hint = hints.get(name)
        props[name] = {"type": _JSON_TYPES.get(typing.get_origin(hint) or hint, "string")}  # type: ignore[arg-type]
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


def _sync(fn: Any) -> Any:
    def call(**kwargs: Any) -> Any:
        out = fn(**kwargs)
        if inspect.isawaitable(out):
            out = _run(out)
        return out if isinstance(out, str) else json.loads(json.dumps(out, default=str))
    return call
