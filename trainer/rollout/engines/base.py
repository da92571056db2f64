"""The rollout-engine protocol: token ids in, sampled token ids and their log-probs out.

An engine samples continuations of token-id prompts and reports, for every sampled token,
its *processed* log-prob: ``log softmax(logits / temperature)`` at the sampled id, with
top-p = 1 and top-k off, so that it is directly comparable with the trainer's
``policy_forward(..., temperature=temperature)``. ``temperature == 0`` means greedy decoding;
its log-probs are reported at temperature 1.

Engines: ``hf`` (transformers, in process, CPU or GPU), ``openai-http`` (any server that
speaks the OpenAI completions API with token ids and log-probs: vLLM, SGLang, or agentgym's
own model server, ``agentgym serve model``), ``vllm`` (in-process vLLM, GPU, optional dependency).

Optional abilities are declared, never probed: an engine says what it can do beyond the three
calls below in its ``abilities`` attribute, an :class:`EngineAbilities` (defined in the leaf
``trainer/engine_names.py`` so that the ``model`` wing can read it too), and the trainer asks
:func:`engine_abilities` (an engine that declares nothing has no ability):

* ``sleeps``: has ``sleep(level)`` and ``wake_up()`` (vllm);
* ``routing``: has ``routing(sequences)``, the experts of every token (vllm);
* ``collective``: one engine sliced over the ranks of a tensor-parallel group, every model call
  made by all of them (vllm under torchrun);
* ``model``: the torch module it samples with, whose experts hooks can observe (hf);
* ``reports_sync``: has ``last_sync``, what the latest sync moved (vllm).

Wrappers (``GroupEngine``, ``VersionedEngine``) declare their inner engine's abilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from ...engine_names import EngineAbilities, engine_abilities

__all__ = ["Engine", "EngineAbilities", "Sample", "engine_abilities"]


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


