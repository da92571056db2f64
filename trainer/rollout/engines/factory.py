"""The engine factory: :func:`make_engine` builds an engine by name.

Each engine module is imported when first asked for, from its entry point in
:data:`~agentgym.trainer.engine_names.ENGINE_CLASSES` (here, and only here, a trainer module is
imported when a function runs), so an optional dependency (vLLM) stays optional and importing
the protocol (:mod:`.base`) imports no engine.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from typing import Any

from agentgym.errors import ConfigError

from ...engine_names import ENGINE_CLASSES
from .base import Engine

__all__ = ["ENGINES", "engine_class", "make_engine"]


def engine_class(name: str) -> Callable[..., Engine]:
    """The class of the engine ``name`` (its module imported now)."""
    module, _, cls = ENGINE_CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def _build(name: str, **kw: Any) -> Engine:
    return engine_class(name)(**kw)


ENGINES: dict[str, Callable[..., Engine]] = {name: functools.partial(_build, name) for name in ENGINE_CLASSES}


def make_engine(name: str, **kwargs: Any) -> Engine:
    """Build an engine by name: ``"hf"`` | ``"openai-http"`` | ``"vllm"``; kwargs go to its class."""
    if name not in ENGINES:
        close = difflib.get_close_matches(name, list(ENGINES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown engine {name!r}; expected one of {sorted(ENGINES)}.{hint}")
    return ENGINES[name](**kwargs)
