"""The hubs' scoring code as the scorer worker runs it (:mod:`.scorer_worker`), never in agentgym's process.

Each factory is built once in the worker's template (it loads the hub and warms its lazy imports,
so a forked child starts with everything loaded) and opens one session per fork:

* :class:`ReasoningGymScorer`: ``open(entry)`` -> ``answer -> score_answer(answer, entry)``. The
  entry travels from agentgym (pickled, base64): some datasets draw a different problem for the
  same index in another process (``polynomial_multiplication`` depends on ``PYTHONHASHSEED``).
* :class:`VerifiersScorer`: ``open(task)`` (a pickled ``vf.Task``) -> ``trace JSON -> the task's
  own ``score`` over that ``vf.Trace``: its rewards and verifiers' weighted sum``.
* :class:`SkyRLScorer`: ``open(row)`` -> the env of one episode: ``{"step": text}`` -> its step's
  ``reward``, ``done`` and observations (a SkyRL env keeps state between the turns of an episode).
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

__all__ = ["ReasoningGymScorer", "SkyRLScorer", "VerifiersScorer", "pack"]


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


class VerifiersScorer:
    def __init__(self, sys_path: list[str]) -> None:
        import sys

        sys.path.extend(p for p in sys_path if p not in sys.path)  # where the taskset's module lives
        import verifiers.v1  # noqa: F401  (imported once, in the template)

    def open(self, task: str) -> Any:
        import asyncio

        import verifiers.v1 as vf

        t = pickle.loads(base64.b64decode(task))  # agentgym's own copy of the task

        def score(trace_json: str) -> dict[str, Any]:
            trace = vf.Trace.model_validate_json(trace_json)
            error = None
            try:
                asyncio.run(t.score(trace))
            except Exception as e:  # the source's scoring failed: reported as verifiers records it
                error = f"{type(e).__name__}: {e}"
            if trace.errors and error is None:
                error = f"{trace.errors[-1].type}: {trace.errors[-1].message}"
            trace.ok = not trace.errors and error is None
            return {"reward": float(trace.reward), "error": error, "trace": trace.model_dump_json(),
                    "rewards": {k: float(r.score) for k, r in trace.rewards.items() if r is not None}}
        return score
