"""The rollout engines by name (``rollout.engine``), as ``"module:Class"`` entry points.

A leaf: nothing here imports an engine (``hf`` needs torch, ``vllm`` vLLM). The factory
(``rollout/engines/factory.py``) builds an engine from this table, and the config check
(``receivers.py``) reads an engine class's keywords from it, both when asked.
"""

from __future__ import annotations

__all__ = ["ENGINE_CLASSES"]

ENGINE_CLASSES: dict[str, str] = {"hf": "agentgym.trainer.rollout.engines.hf:HFEngine",
                                  "openai-http": "agentgym.trainer.rollout.engines.openai_http:OpenAIHTTPEngine",
                                  "vllm": "agentgym.trainer.rollout.engines.vllm:VLLMEngine"}
