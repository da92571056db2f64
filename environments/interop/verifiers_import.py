"""``agentgym/Verifiers-v0``: a verifiers (v1) taskset as a token env, scored by its own rubric.

    env = gym.make("agentgym/Verifiers-v0", taskset=my_taskset)           # a vf.Taskset object
    env = gym.make("agentgym/Verifiers-v0", taskset="reverse_text",       # an installed package
                   taskset_config={...})
    env = gym.make("agentgym/Verifiers-v0", taskset_factory="pkg.mod:make")  # what a suite file names

One task per episode (reset option ``index``, else drawn from the seed; an infinite taskset is
read up to ``max_tasks``). The task's ``system_prompt`` is the developer instructions and its
prompt the user message. Tools: every ``@vf.tool`` method of the taskset's and the task's
``vf.Toolset`` s becomes a Harmony tool with the method's signature as its JSON schema, and is
called in process (verifiers would serve them over MCP to a harness). The final answer goes into
a ``vf.Trace`` (the conversation as verifiers records it) and the task's own ``score`` runs: every
``@vf.reward`` (and plugged reward or judge) lands in ``trace.rewards``; the outcome is verifiers'
weighted sum (``trace.reward``) and each component is reported as ``vf:NAME`` (weight 0 in shaped
mode: reported, not paid twice). Rewards that need a runtime (a sandbox) are skipped by verifiers
when scoring without one; the adapter says so in the result.

Replayable when the task's scoring needs neither a runtime nor a judge (pure functions of the
trace); otherwise not. The oracle answers ``task.data.answer`` where the task data has one (a
taskset whose rubric wants another form, tags for instance, will fail the oracle check: validate
shows it). verifiers' user simulation (multi-turn ``Interaction``) is not supported.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from typing import Any, ClassVar

import numpy as np

from agentgym.env import Task
from agentgym.environments.interop.base import HubEnv, Provenance, require
from agentgym.environments.interop.reasoning_gym import _version
from agentgym.errors import ConfigError
from agentgym.tools import Tool, ToolResult

__all__ = ["VerifiersEnv"]

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


class VerifiersEnv(HubEnv):
    default_id = "agentgym/Verifiers-v0"
    hub = "verifiers"
    splits: ClassVar[tuple[str, ...]] = ()
    instructions = "Answer in the final channel."

    def __init__(self, *, taskset: Any = None, taskset_config: dict[str, Any] | None = None,
                 taskset_factory: str | None = None, max_tasks: int = 1000, split: str | None = None,
                 **kwargs: Any) -> None:
        vf = require("verifiers.v1", "verifiers")
        if taskset_factory is not None:  # "module:function" returning a Taskset: what a suite file can name
            import importlib

            module, _, fn = taskset_factory.partition(":")
            taskset = getattr(importlib.import_module(module), fn)(**(taskset_config or {}))
        if split is not None:
            raise ConfigError("verifiers tasksets choose their split in their own config (e.g. dataset_split): pass "
                              "it in taskset_config=, not split=")
        if isinstance(taskset, str):
            from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

            cfg = taskset_config_type(taskset).model_validate({"id": taskset, **(taskset_config or {})})
            taskset = taskset_class(taskset)(cfg)
        if not isinstance(taskset, vf.Taskset):
            raise ConfigError(f"taskset must be a verifiers.v1.Taskset or an installed taskset id, got {taskset!r:.100}")
        super().__init__(**kwargs)
        self.taskset = taskset
        view = taskset if taskset.bounded else taskset.take(max_tasks)
        self.tasks: list[Any] = list(view)
        if not self.tasks:
            raise ConfigError(f"the taskset {type(taskset).__name__} yielded no task")
        self.vtask: Any = None
        self._toolsets = [ts for ts in type(taskset).toolsets(taskset.config)]
        self._replayable, self._why = self._replay_check()

    # ------------------------------------------------------------------ HubEnv API
    def provenance(self) -> Provenance:
        has_answer = all(isinstance(getattr(t.data, "answer", None), (str, int, float)) for t in self.tasks[:8])
        return Provenance(
            hub=f"verifiers {_version('verifiers')}", source=type(self.taskset).__name__,
            replayable=self._replayable, replay_note=self._why, oracle=has_answer,
            oracle_note="the task data's answer field" if has_answer else "the task data has no answer field")

    def oracle_action(self) -> list[int]:
        answer = getattr(self.vtask.data, "answer", None) if self.vtask is not None else None
        if answer is None:
            return super().oracle_action()
        return self.codec.final_ids(str(answer))

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        unknown = set(options) - {"index"}
        if unknown:
            raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: ['index']")
        index = options.get("index")
        if index is None:
            index = int(rng.integers(len(self.tasks)))
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < len(self.tasks):
            raise ConfigError(f"reset option 'index' must be an int in [0, {len(self.tasks)}), got {index!r}")
        self.vtask = t = self.tasks[int(index)]
        self.instructions = t.data.system_prompt or type(self).instructions
        return Task(id=str(t.data.id or t.key[:16]), prompt=t.data.prompt_text, meta={"index": int(index)})

    def tools(self) -> list[Tool]:
        out = []
        task_sets = type(self.vtask).toolsets(self.vtask.config) if self.vtask is not None else []
        for toolset in [*self._toolsets, *task_sets]:
            for fn in _tool_methods(toolset):
                out.append(Tool(getattr(fn, "tool_name", None) or fn.__name__, inspect.getdoc(fn) or fn.__name__,
                                _schema(fn), _sync(fn)))
        return out

    def score_source(self, answer: str) -> ToolResult:
        import verifiers.v1 as vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        t = self.vtask
        nodes = []
        if t.data.system_prompt:
            nodes.append(MessageNode(message=vf.SystemMessage(content=t.data.system_prompt)))
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None,
                                 message=vf.UserMessage(content=t.data.prompt_text)))
        nodes.append(MessageNode(parent=len(nodes) - 1, message=vf.AssistantMessage(content=answer), sampled=True))
        trace = vf.Trace(task=TraceTask(type=type(t).__name__, data=t.data, key=t.key, hash=t.hash),
                         agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes, is_completed=True, ok=True)
        try:
            _run(t.score(trace))
        except Exception as e:  # verifiers' scoring raised (a TaskError): the source's bug, reported
            return self.infra_fault(f"verifiers scoring raised {type(e).__name__}: {e}")
        comps = {f"vf:{k}": float(r.score) for k, r in trace.rewards.items() if r is not None}
        for k in comps:
            self.shaping.setdefault(k, 0.0)
        detail = ", ".join(f"{k}={v:g}" for k, v in comps.items()) or "no reward ran"
        return ToolResult(f"verifiers reward {trace.reward:g} ({detail})", terminal=True, outcome=float(trace.reward),
                          components=comps)

    # ------------------------------------------------------------------ internals
    def _replay_check(self) -> tuple[bool, str]:
        t = self.tasks[0]
        if t.plugged_judges():
            return False, "its rubric asks an LLM judge, whose replies may change"
        needs_runtime = [fn.__name__ for fn in t.hooks("reward")
                         if (p := inspect.signature(fn).parameters.get("runtime")) is not None
                         and p.default is inspect.Parameter.empty]
        if needs_runtime:
            return False, f"rewards {needs_runtime} need a runtime (sandbox) that agentgym does not provide"
        return True, "the tasks are the taskset's fixed data and every reward is a function of the trace"


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
