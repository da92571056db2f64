"""Rollout engines behind one protocol (``base.Engine``): ``hf``, ``openai-http``, ``vllm``.

Only the protocol and the factory are imported here; each engine module is imported by
``make_engine`` when first asked for, so optional dependencies (vLLM) stay optional.
"""

from .base import Engine, Sample
from .factory import ENGINES, make_engine

__all__ = ["ENGINES", "Engine", "Sample", "make_engine"]
