"""What every imported environment shares: provenance, infrastructure faults, the no-attempt guard.

An imported env is a :class:`~agentgym.env.ToolEnv` whose task, tools and scoring come from
another hub's code. ``HubEnv`` adds three things on top of ToolEnv's token contract:

* :class:`Provenance`: what the adapter can promise about the source env: whether it is
  replayable (same seed and actions give the same episode: leaderboards replay-verify only
  then), whether an oracle exists, and why not where it does not. ``agentgym validate`` and
  ``agentgym leaderboard verify`` read it.
* Infrastructure faults: a source server that stops answering, a judge that cannot be
  reached. :meth:`HubEnv.infra_fault` ends the episode as *truncated*, with
  ``info["infra_error"]`` and ``trajectory.meta["infra_error"]`` set: never a 0 outcome for the
  policy (the trainer masks such episodes; a leaderboard refuses them).
* An LLM judge (``judge={...}``, :mod:`agentgym.judge`) on final answers: its score is the outcome
  (``role: outcome``) or the shaped term ``judge`` (``role: shaped``); its calls are recorded in
  ``trajectory.meta["judge_calls"]`` and replay re-scores from them (:meth:`HubEnv.load_record`).
* The no-attempt guard (``no_attempt_guard=True``): the source's score of an answer minus what
  the same source pays for not attempting the task (an empty answer, ``"Done."``, a refusal, and
  a constant in the answer format the task expects, :meth:`HubEnv.degenerate_answers`, unless that
  constant is the task's answer) on the same task, floored at 0. Sources that pay for doing nothing are the source's problem;
  ``agentgym validate`` names it, and the guard makes the env usable anyway.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from agentgym.env import ToolEnv
from agentgym.errors import ConfigError
from agentgym.tools import ToolResult

__all__ = ["NO_ATTEMPT_ANSWERS", "HubEnv", "Provenance", "pick_index", "require"]

# What validate's no-attempt probes send (agentgym.leaderboards.policies), and a refusal.
NO_ATTEMPT_ANSWERS = ("", "Done.", "I cannot help with that.")
INTEROP_HINT = "pip install 'agentgym-suite[interop]'"


def require(module: str, package: str) -> ModuleType:
    """Import a hub's package where it is used, with an install hint when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"this environment needs {package} ({e}); install it with {INTEROP_HINT}") from None


def pick_index(options: dict[str, Any], rng: np.random.Generator, n: int) -> int:
    """The task index of a reset of an env over ``n`` rows: ``options["index"]`` or a draw from
    ``rng``; any other option, or an index out of [0, n), is a :class:`ConfigError`."""
    unknown = set(options) - {"index"}
    if unknown:
        raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: ['index']")
    index = options.get("index")
    if index is None:
        return int(rng.integers(n))
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < n:
        raise ConfigError(f"reset option 'index' must be an int in [0, {n}), got {index!r}")
    return int(index)


@dataclass(frozen=True)
class Provenance:
    hub: str  # the source project and version, e.g. "reasoning-gym 0.1.25"
    source: str  # which env of that hub: dataset name, package, URL
    replayable: bool  # same seed + same actions -> the same episode, bit for bit
    replay_note: str  # why (not)
    oracle: bool  # a scripted perfect policy exists for this source env
    oracle_note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class HubEnv(ToolEnv):
    """Base class of the interop adapters (``agentgym/ReasoningGym-v0`` and friends)."""

    hub: ClassVar[str] = ""

    def __init__(self, *, no_attempt_guard: bool = False, judge: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        from agentgym.judge import Judge, JudgeConfig

        self.judge = Judge(JudgeConfig.from_dict(judge)) if judge is not None else None
        if self.judge is not None and self.judge.config.role == "shaped":
            # an instance's own shaped terms: the judge's weight comes from its config
            self.extra_shaping = {**type(self).extra_shaping, "judge": self.judge.config.weight}  # type: ignore[misc]
        super().__init__(**kwargs)
        self.no_attempt_guard = bool(no_attempt_guard)
        self._infra: str | None = None

    # ------------------------------------------------------------------ adapter API
    def provenance(self) -> Provenance:
        raise NotImplementedError

    def oracle_action(self) -> list[int]:
        """The next action of a perfect policy; adapters without an oracle raise ConfigError."""
        raise ConfigError(f"{self.env_id} ({self.provenance().source}) has no oracle: "
                          f"{self.provenance().oracle_note}")

    def degenerate_answers(self) -> list[str]:
        """Constants in the answer format the current task expects that are *not* its answer
        (``#### 0`` for a gsm8k row whose answer is not 0): the no-attempt guard probes them too."""
        return []

    def no_attempt_probes(self) -> list[str]:
        return [*NO_ATTEMPT_ANSWERS, *self.degenerate_answers()]

    def score_source(self, answer: str) -> ToolResult:
        """The source hub's verdict on a final answer (ToolEnv's ``score_final``, before the judge)."""
        raise NotImplementedError

    def score_final(self, answer: str) -> ToolResult:
        result = self.score_source(answer)
        if self.judge is None or not result.terminal or result.error == "infra_error":
            return result
        from agentgym.judge import JudgeError

        assert self.task is not None and self.trajectory is not None
        try:
            call = self.judge.score(question=self.task.prompt, answer=answer,
                                    reference="" if self.task.answer is None else str(self.task.answer))
        except JudgeError as e:
            return self.infra_fault(f"judge: {e}")
        self.trajectory.meta.setdefault("judge_calls", []).append(call.to_dict())
        result.content += f"\njudge: {call.score:g}"
        if self.judge.config.role == "outcome":
            result.outcome = call.score
        else:
            result.components["judge"] = call.score
        return result

    def load_record(self, record: Any) -> None:
        """Replay (leaderboards): the judge answers from ``record``'s recorded calls, never the network."""
        from agentgym.judge import Judge

        if self.judge is not None:
            self.judge = Judge.from_record(self.judge.config, list(record.meta.get("judge_calls", [])))

    def infra_fault(self, message: str) -> ToolResult:
        """Report an infrastructure fault from a tool or from scoring: the episode ends truncated,
        never scored (returns the ToolResult to hand back to ToolEnv)."""
        self._infra = message
        return ToolResult(f"[agentgym] infrastructure fault, the episode is void: {message}", ok=False,
                          error="infra_error", terminal=True, outcome=0.0)

    def guarded(self, score: Callable[[str], float], answer: str) -> tuple[float, dict[str, float]]:
        """``score(answer)``, less what the source pays for not attempting (with the guard on).

        Returns the outcome and the raw numbers for ``info``; without the guard the outcome is
        the source's own score.
        """
        raw = float(score(answer))
        if not self.no_attempt_guard:
            return raw, {"source_score": raw}
        idle = max(float(score(a)) for a in self.no_attempt_probes())
        return max(0.0, raw - idle), {"source_score": raw, "no_attempt_score": idle}

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        self._infra = None
        obs, info = super().reset(seed=seed, options=options)
        assert self.trajectory is not None
        self.trajectory.meta["no_attempt_guard"] = self.no_attempt_guard
        info["provenance"] = self.provenance().to_dict()
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self._infra is not None:
            # Not an outcome: the episode is cut (truncated), carries no reward, and says why.
            traj = self.trajectory
            assert traj is not None
            turn = traj.turns[-1]
            turn.reward = 0.0
            traj.terminated, traj.truncated = False, True
            traj.meta["infra_error"] = self._infra
            info["infra_error"] = self._infra
            return obs, 0.0, False, True, info
        return obs, reward, terminated, truncated, info
