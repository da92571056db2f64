"""The hubs' scoring code as the scorer worker runs it (:mod:`.scorer_worker`), never in agentgym's process.

Each factory is built once in the worker's template (it loads the hub and warms its lazy imports,
so a forked child starts with everything loaded) and opens one session per fork:

* :class:`ReasoningGymScorer`: ``open(entry)`` -> ``answer -> score_answer(answer, entry)``. The
  entry travels from agentgym (pickled, base64): some datasets draw a different problem for the
  same index in another process (``polynomial_multiplication`` depends on ``PYTHONHASHSEED``).
* :class:`SkyRLScorer`: ``open(row)`` -> the env of one episode: ``{"step": text}`` -> its step's
  ``reward``, ``done`` and observations (a SkyRL env keeps state between the turns of an episode).
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

__all__ = ["ReasoningGymScorer", "SkyRLScorer", "pack"]


def pack(obj: Any) -> str:
    """``obj`` as the scorer worker's ``open`` receives it (pickled, base64)."""
    return base64.b64encode(pickle.dumps(obj)).decode()


class ReasoningGymScorer:
    def __init__(self, dataset: str, config: dict[str, Any]) -> None:
        import reasoning_gym

        self.source = reasoning_gym.create_dataset(dataset, **config)
        entry = self.source[0]
        for warm in (str(entry.get("answer")), "0", "x + 1", "[1, 2]"):  # import what scoring imports lazily
            try:
                self.source.score_answer(warm, entry)
            except Exception:
                pass

    def open(self, entry: str) -> Any:
        problem = pickle.loads(base64.b64decode(entry))  # agentgym's own entry, never the policy's text
        return lambda answer: float(self.source.score_answer(str(answer), problem))


class SkyRLScorer:
    def __init__(self, env_class: str, env_config: dict[str, Any]) -> None:
        import skyrl_gym

        self.make = skyrl_gym.make
        self.env_class, self.env_config = env_class, env_config

    def open(self, row: dict[str, Any]) -> Any:
        env = self.make(self.env_class, env_config=self.env_config, extras=row)
        env.init(row["prompt"])

        def step(text: str) -> dict[str, Any]:
            out = env.step(str(text))
            return {"reward": float(out["reward"]), "done": bool(out["done"]),
                    "observations": [str(m.get("content", "")) for m in out["observations"]]}
        return step
