"""Policies that ``agentgym-eval`` runs through a suite, by name.

A policy plays whole episodes on environments the evaluator builds (one per worker thread); it is
an ``EpisodePolicy``, not a ``StepPolicy`` (:mod:`agentgym.oracles`: env -> the next action)::

    class EpisodePolicy(Protocol):
        name: str
        def play(self, env, *, seed, options=None) -> Trajectory: ...
        def describe(self) -> dict: ...      # model, engine, sampling settings -> submission metadata
        def close(self) -> None: ...

``play`` resets ``env`` with ``seed``/``options``, plays one episode and returns a copy of
``env.unwrapped.trajectory``; it must be safe to call from several threads at once, each with
its own env. A policy may also carry a ``tokenizer`` attribute: the environments are then built
with it (absent or None: agentgym's byte tokenizer). Policies that sample derive their sampling
seed from ``seed`` (every trial of a task has its own), so an episode is reproducible.

``POLICIES`` maps names to ``"module:factory"`` strings, imported only when used. Factories
take keyword arguments only; on the command line they come from ``--policy-arg key=value``.
The built-in scripted policies (no model) are the baselines and the validator's probes:

* ``oracle``: the environment's scripted perfect policy (``agentgym.oracles``);
* ``do-nothing``: every turn a note on the analysis channel, never a tool call or an answer;
* ``just-answer``: a final answer at once (``"Done."``), without looking at anything.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agentgym.errors import ConfigError
from agentgym.harmony import Message
from agentgym.trajectory import Trajectory

__all__ = ["POLICIES", "DoNothingPolicy", "EpisodePolicy", "JustAnswerPolicy", "OraclePolicy", "ScriptedPolicy",
           "make_policy"]

POLICIES: dict[str, str] = {
    "oracle": "agentgym.leaderboards.policies:OraclePolicy",
    "do-nothing": "agentgym.leaderboards.policies:DoNothingPolicy",
    "just-answer": "agentgym.leaderboards.policies:JustAnswerPolicy",
    "hf": "agentgym.leaderboards.engine_policy:hf_policy",
    "vllm": "agentgym.leaderboards.engine_policy:vllm_policy",
    "openai-http": "agentgym.leaderboards.engine_policy:openai_http_policy",
    "openai-chat": "agentgym.chat.policy:OpenAIChatPolicy",
}


@runtime_checkable
class EpisodePolicy(Protocol):
    name: str

    def play(self, env: Any, *, seed: int, options: dict[str, Any] | None = None) -> Trajectory:
        """Reset ``env`` with ``seed``/``options``, play one episode, return a copy of its trajectory."""
        ...

    def describe(self) -> dict[str, Any]:
        """Model, engine, sampling settings: recorded in the submission's metadata."""
        ...

    def close(self) -> None: ...


def _factory(name: str) -> Callable[..., EpisodePolicy]:
    if name not in POLICIES:
        near = difflib.get_close_matches(name, list(POLICIES), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise ConfigError(f"unknown policy {name!r}; known: {sorted(POLICIES)}.{hint}")
    module, attr = POLICIES[name].split(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"policy {name!r} lives in {module}, which could not be imported ({e}); "
                          "install the extra it needs (pip install 'agentgym-suite[train]' for hf)") from e
    return getattr(mod, attr)  # type: ignore[no-any-return]


def make_policy(name: str, defaults: dict[str, Any] | None = None, **kwargs: Any) -> EpisodePolicy:
    """Build policy ``name`` with ``kwargs``; ``defaults`` (the suite's sampling settings) fill in
    only the keyword arguments the factory accepts and the caller did not give."""
    factory = _factory(name)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for k, v in (defaults or {}).items():
        if k not in kwargs and (k in params or takes_any):
            kwargs[k] = v
    try:
        return factory(**kwargs)
    except TypeError as e:
        accepted = [p for p in params if p != "self"]
        raise ConfigError(f"policy {name!r} does not take these arguments ({e}); it accepts {accepted}") from e


class ScriptedPolicy:
    """A policy given by ``action(env) -> token ids``, called once per turn. No sampling, no model."""

    name = "scripted"
    tokenizer: Any = None

    def action(self, env: Any) -> np.ndarray:
        raise NotImplementedError

    def play(self, env: Any, *, seed: int, options: dict[str, Any] | None = None) -> Trajectory:
        from agentgym.oracles import play_episode

        return copy.deepcopy(play_episode(env, self.action, seed=seed, options=options))

    def describe(self) -> dict[str, Any]:
        return {"engine": "scripted", "model": self.name, "temperature": None}

    def close(self) -> None:
        pass


class OraclePolicy(ScriptedPolicy):
    """The oracle the env declared at registration (``agentgym.capabilities(id).oracle``), or
    ``oracle`` (``"module:function"`` or a callable ``env -> action ids``) for an env without one."""

    name = "oracle"

    def __init__(self, oracle: str | Callable[[Any], np.ndarray] | None = None) -> None:
        self._custom: Callable[[Any], np.ndarray] | None = None
        self._spec = oracle if isinstance(oracle, str) or oracle is None else getattr(oracle, "__qualname__", "?")
        if callable(oracle):
            self._custom = oracle
        elif oracle is not None:
            from agentgym.oracles import load_callable

            self._custom = load_callable(oracle)

    def action(self, env: Any) -> np.ndarray:
        if self._custom is not None:
            return self._custom(env)
        from agentgym.oracles import get_oracle

        return get_oracle(env.unwrapped.env_id)(env)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "oracle": self._spec or "agentgym.capabilities(env_id).oracle"}


class DoNothingPolicy(ScriptedPolicy):
    """Every turn a complete analysis-channel message: no tool call, no answer, until the budget ends."""

    name = "do-nothing"

    def __init__(self, note: str = "I will wait.") -> None:
        self.note = note

    def action(self, env: Any) -> np.ndarray:
        codec = env.unwrapped.codec
        ids = codec.render(Message("assistant", self.note, channel="analysis"))
        return np.asarray(ids[len(codec.generation_prompt):], dtype=np.int64)


class JustAnswerPolicy(ScriptedPolicy):
    """A final answer on the first turn without any tool call (``answer``, default "Done.")."""

    name = "just-answer"

    def __init__(self, answer: str = "Done.") -> None:
        self.answer = answer

    def action(self, env: Any) -> np.ndarray:
        return np.asarray(env.unwrapped.codec.final_ids(self.answer), dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "answer": self.answer}
