"""The engine factory: :func:`make_engine` builds an engine by name.

Each engine module is imported when first asked for (here, and only here, a trainer module is
imported inside a function), so an optional dependency (vLLM) stays optional and importing the
protocol (:mod:`.base`) imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentgym.errors import ConfigError

from .base import Engine

__all__ = ["ENGINES", "make_engine"]


def _hf(**kw: Any) -> Engine:
    from .hf import HFEngine

    return HFEngine(**kw)


def _openai_http(**kw: Any) -> Engine:
    from .openai_http import OpenAIHTTPEngine

    return OpenAIHTTPEngine(**kw)


def _vllm(**kw: Any) -> Engine:
    from .vllm import VLLMEngine

    return VLLMEngine(**kw)


ENGINES: dict[str, Callable[..., Engine]] = {"hf": _hf, "openai-http": _openai_http, "vllm": _vllm}


def make_engine(name: str, **kwargs: Any) -> Engine:
    """Build an engine by name: ``"hf"`` | ``"openai-http"`` | ``"vllm"``; kwargs go to its class."""
    if name not in ENGINES:
        import difflib

        close = difflib.get_close_matches(name, list(ENGINES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown engine {name!r}; expected one of {sorted(ENGINES)}.{hint}")
    return ENGINES[name](**kwargs)
