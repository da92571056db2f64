"""The mapping-valued config keys, checked against what receives them before anything is built.

A mapping is passed on as keywords or options to someone else's code, so a typo in one of its keys
(``env.kwargs.dificulty=2``, ``sft.options.depht=[1]``) would be ignored, or fail minutes later
with a traceback. Each is checked, by name, against its receiver:

========================  ===========================================================================
``env.kwargs``            the registered env's constructor (``agentgym.registration.constructor_kwargs``)
``env.train_options``,    the reset options the env declares (``Capabilities.reset_options``)
``env.eval_options``,
``sft.options``
``rollout.engine_kwargs`` the engine class's constructor (``engine_names.py``)
``sft.teacher_kwargs``    the teacher factory the env declares (``Capabilities.teachers``)
``rollout.ray.init``      ``ray.init`` (with ``rollout.backend: ray``)
``model.tiny``            ``GptOssConfig``, where the tiny model's config is built (model/gptoss.py)
========================  ===========================================================================

A receiver that takes any keyword (``**kwargs`` passed on to another hub's code, vLLM's engine
arguments) or an env that declares no reset options accepts every key: only what is known to be
wrong is refused. Modules are imported only for a mapping that is set.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError
from agentgym.oracles import load_callable
from agentgym.registration import capabilities, constructor_kwargs

from .engine_names import ENGINE_CLASSES

__all__ = ["OWN", "check_receivers", "check_teacher_kwargs", "keyword_names", "unknown_key"]

# Env constructor arguments that are config keys of their own (env.max_turns, ...; the tokenizer
# comes from the model): TrainConfig.validate refuses them in env.kwargs.
OWN = ("tokenizer", "reward_mode", "max_turns", "max_tokens", "max_action_tokens", "prompt")


def _named(fn: Callable[..., Any], skip: int = 0) -> list[str]:
    """The arguments ``fn`` names that a keyword can set (after its first ``skip``)."""
    named = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [p.name for p in named[skip:]]


def keyword_names(fn: Callable[..., Any], skip: int = 0) -> list[str] | None:
    """The arguments ``fn`` takes by keyword (after its first ``skip`` positional ones); None when
    it takes any (``**kwargs``)."""
    if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
        return None
    return _named(fn, skip)


def unknown_key(key: str, given: Iterable[Any], accepted: Sequence[str] | None, receiver: str) -> str | None:
    """One line for the first name of ``given`` that ``accepted`` lacks (None: all fine, or
    ``accepted`` is None: anything goes): which key, what is accepted, the closest name."""
    if accepted is None:
        return None
    for name in given:
        if name not in accepted:
            hint = difflib.get_close_matches(str(name), list(accepted), n=1, cutoff=0.6)
            expected = f"expected one of {sorted(accepted)}" if accepted else "it takes none"
            return (f"{key}.{name}: not accepted by {receiver}; {expected}"
                    + (f"; did you mean '{key}.{hint[0]}'?" if hint else f"; fix: drop {key}.{name}"))
    return None


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise ConfigError(problem)


def check_teacher_kwargs(env_id: str, teacher: str, kwargs: Mapping[str, Any]) -> None:
    """``sft.teacher_kwargs`` against the factory ``factory(oracle, **kwargs)`` that ``env_id``
    declares for ``teacher`` (an undeclared teacher is ``sft.teacher``'s own error)."""
    spec = capabilities(env_id).teachers.get(teacher)
    if spec is None or not kwargs:
        return
    _refuse(unknown_key("sft.teacher_kwargs", kwargs, keyword_names(load_callable(spec, "teacher"), skip=1),
                        f"the teacher {teacher!r} of {env_id} ({spec})"))


def _env_kwargs(cfg: Any) -> None:
    e = cfg.env
    if not e.kwargs or e.id not in gym.registry:  # an unknown id: preflight names the closest one
        return
    try:
        accepted = constructor_kwargs(e.id)
    except ImportError:  # the env's module cannot load here: gym.make says why
        return
    if accepted is not None:  # gym.make's own keywords too, less those with env.* keys of their own
        accepted = [a for a in [*accepted, *_named(gym.make, skip=1), *gym.registry[e.id].kwargs] if a not in OWN]
    _refuse(unknown_key("env.kwargs", e.kwargs, accepted, f"{e.id}'s constructor"))


def _reset_options(cfg: Any) -> None:
    declared = capabilities(cfg.env.id).reset_options
    receiver = f"{cfg.env.id}'s reset (the options it declares)"
    for key, options in (("env.train_options", cfg.env.train_options), ("env.eval_options", cfg.env.eval_options),
                         ("sft.options", cfg.sft.options)):
        _refuse(unknown_key(key, options, declared, receiver))
    if (key := cfg.env.sample_option) is not None and declared is not None and key not in declared:
        raise ConfigError(f"env.sample_option={key!r}: not a reset option of {cfg.env.id}; expected one of "
                          f"{sorted(declared)}, or null")
    c = cfg.curriculum
    if c.levels and declared is not None and c.option not in declared:  # the option the levels go in
        hint = difflib.get_close_matches(c.option, declared, n=1, cutoff=0.6)
        raise ConfigError(f"curriculum.option={c.option!r}: not a reset option of {cfg.env.id}; expected one "
                          f"of {sorted(declared)}" + (f"; did you mean curriculum.option={hint[0]}?" if hint else ""))


def _engine_kwargs(cfg: Any) -> None:
    r = cfg.rollout
    if not r.engine_kwargs:
        return
    if r.engine not in ENGINE_CLASSES:  # preflight names the closest engine
        return
    module, _, name = ENGINE_CLASSES[r.engine].partition(":")
    try:  # the engine's entry point, resolved now: its module imports torch (hf) or vLLM
        receiver = getattr(importlib.import_module(module), name)
    except ImportError:  # its dependency is missing here: building it says how to install it
        return
    accepted = keyword_names(receiver)
    if r.engine == "hf" and accepted is not None:  # the learner's module and its pad id
        accepted = [a for a in accepted if a not in ("model", "pad_id")]
    _refuse(unknown_key("rollout.engine_kwargs", r.engine_kwargs, accepted,
                        f"the {r.engine} engine ({getattr(receiver, '__name__', r.engine)})"))


def _ray_init(cfg: Any) -> None:
    init = cfg.rollout.ray.init
    if cfg.rollout.backend != "ray" or not init:
        return
    try:
        import ray
    except ImportError:  # the Ray collector says how to install it
        return
    # its **kwargs takes only the experimental ``_name`` options; address is rollout.ray.address
    named = [a for a in _named(ray.init) if a != "address"]
    _refuse(unknown_key("rollout.ray.init", [k for k in init if not str(k).startswith("_")], named, "ray.init"))


def check_receivers(cfg: Any) -> None:
    """Every mapping-valued key of ``cfg`` (a TrainConfig) against its receiver; ConfigError
    (one line) on the first unknown name."""
    _env_kwargs(cfg)
    _reset_options(cfg)
    _engine_kwargs(cfg)
    check_teacher_kwargs(cfg.env.id, cfg.sft.teacher, cfg.sft.teacher_kwargs)
    _ray_init(cfg)
