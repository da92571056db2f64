"""The rollout engines by name (``rollout.engine``), as ``"module:Class"`` entry points, and the
optional abilities an engine declares (:class:`EngineAbilities`).

A leaf: nothing here imports an engine (``hf`` needs torch, ``vllm`` vLLM). The factory
(``rollout/engines/factory.py``) builds an engine from this table, and the config check
(``receivers.py``) reads an engine class's keywords from it, both when asked. The abilities live
here, below the engines, so that every wing that asks an engine for one (``model/routing.py``,
the run) reads the same declaration; ``rollout/engines/base.py`` describes the seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

__all__ = ["ENGINE_CLASSES", "EngineAbilities", "engine_abilities"]

ENGINE_CLASSES: dict[str, str] = {"hf": "agentgym.trainer.rollout.engines.hf:HFEngine",
                                  "openai-http": "agentgym.trainer.rollout.engines.openai_http:OpenAIHTTPEngine",
                                  "vllm": "agentgym.trainer.rollout.engines.vllm:VLLMEngine"}


@dataclass(frozen=True)
class EngineAbilities:
    """What an engine can do beyond ``generate``, ``sync_weights`` and ``close``; an engine
    declares it as its ``abilities`` attribute (a wrapper: its inner engine's)."""

    sleeps: bool = False
    """It has ``sleep(level)`` (free accelerator memory while the learner updates) and ``wake_up()``."""
    routing: bool = False
    """It has ``routing(sequences)``: the experts it routes each token of each sequence to, one
    ``(layers, len, k)`` int array per sequence."""
    collective: bool = False
    """Each rank of a tensor-parallel group holds a slice of one engine in its own process (vLLM's
    ``external_launcher``): every model call (``generate``, ``routing``) must be made by all the
    group's ranks with the same inputs."""
    model: Any = None
    """The torch module it samples with, in this process (``hf``): its experts can be observed
    with hooks. None when no module is visible (a server, vLLM)."""
    reports_sync: bool = False
    """It has ``last_sync``: what the latest ``sync_weights`` moved (``bytes``, ``seconds``, ...)."""


NO_ABILITIES = EngineAbilities()


def engine_abilities(engine: object) -> EngineAbilities:
    """The abilities ``engine`` declares (its ``abilities`` attribute); an engine that declares
    none has none."""
    declared = getattr(engine, "abilities", NO_ABILITIES)
    if not isinstance(declared, EngineAbilities):
        raise ConfigError(f"{type(engine).__name__}.abilities must be an EngineAbilities, got "
                          f"{type(declared).__name__}; fix: declare abilities = EngineAbilities(...) "
                          "(agentgym.trainer.rollout.engines.base), or leave it out for none")
    return declared
