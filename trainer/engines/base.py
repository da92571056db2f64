"""The rollout-engine protocol: token ids in, sampled token ids and their log-probs out.

An engine samples continuations of token-id prompts and reports, for every sampled token,
its *processed* log-prob: ``log softmax(logits / temperature)`` at the sampled id, with
top-p = 1 and top-k off, so that it is directly comparable with the trainer's
``policy_forward(..., temperature=temperature)``. ``temperature == 0`` means greedy decoding;
its log-probs are reported at temperature 1.

Engines: ``hf`` (transformers, in process, CPU or GPU), ``openai-http`` (any server that
speaks the OpenAI completions API with token ids and log-probs: vLLM, SGLang, or agentgym's
own model server, ``agentgym serve model``), ``vllm`` (in-process vLLM, GPU, optional dependency).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from agentgym.errors import ConfigError

__all__ = ["ENGINES", "ENGINE_CLASSES", "Engine", "Sample", "engine_class", "make_engine"]


@dataclass
class Sample:
    """One continuation: the sampled ids (stop token included), their log-probs, why it ended."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"] | str = "length"
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """What the trainer needs from a rollout engine."""

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        stop_ids: Sequence[int],
        seed: int | None = None,
    ) -> list[Sample]:
        """Sample one continuation per prompt; stop after a token in ``stop_ids`` (kept)."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make subsequent samples come from ``model``'s current weights."""
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...


# name -> "module:Class", imported when used (hf needs torch, vllm vLLM).
ENGINE_CLASSES: dict[str, str] = {"hf": "agentgym.trainer.engines.hf:HFEngine",
                                  "openai-http": "agentgym.trainer.engines.openai_http:OpenAIHTTPEngine",
                                  "vllm": "agentgym.trainer.engines.vllm:VLLMEngine"}


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
        import difflib

        close = difflib.get_close_matches(name, list(ENGINES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown engine {name!r}; expected one of {sorted(ENGINES)}.{hint}")
    return ENGINES[name](**kwargs)
