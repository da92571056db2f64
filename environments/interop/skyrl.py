"""``agentgym/SkyRL-v0``: a SkyRL-gym text env (``skyrl_gym.make(env_class, extras=row)``) as a token env.

    env = gym.make("agentgym/SkyRL-v0", env_class="gsm8k", tasks="gsm8k_train.jsonl")

``tasks`` is a list of SkyRL dataset rows (or a JSONL file of them): ``{"prompt": [messages],
"reward_spec": {"ground_truth": ...}, "extra_info": {...}}``, the format SkyRL's trainer reads.
One row per episode (reset option ``index``, else drawn from the seed). The row's system message
is the developer instructions, its user messages the task. Each final-channel answer is the
text SkyRL's ``env.step`` receives; its observations come back as the user's next message
(multi-turn envs such as ``gsm8k_multi_turn``) until SkyRL says ``done``. The outcome is the
reward of the last step; earlier steps' rewards are the shaped term ``step_reward``. For the env
classes whose scoring agentgym knows (:data:`PURE`), a format score is not an outcome: only the
correct-answer reward (1) counts, a mid-episode format score is reported as ``format_score``
(weight 0), and the no-attempt guard also probes the format's constants (``#### 0``).

SkyRL's env never steps in agentgym's process: each episode's env lives in its own fresh child of
a scorer worker (:mod:`.isolation`; ``score_timeout`` seconds per step), created at the first
answer and killed when the episode ends. Tools are
SkyRL's own text protocol inside the answer (``<sql>...</sql>``, ``<search>...</search>``), not
Harmony tool calls.

Replayable for the env classes whose scoring is a pure function of the text (``gsm8k``,
``gsm8k_multi_turn``, ``aime``); the others reach outside services (a search server, SQL files)
and are not. SkyRL datasets come one file per split, so ``split`` is refused: pass the split's file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agentgym.env import Task
from agentgym.environments.interop.base import HubEnv, Provenance, pick_index, require
from agentgym.environments.interop.isolation import (
    IsolatedScorer,
    ScorerFault,
    SessionError,
    release_scorer,
    shared_scorer,
)
from agentgym.environments.interop.reasoning_gym import _version
from agentgym.errors import ConfigError, DatasetError
from agentgym.tools import ToolResult

__all__ = ["SkyRLEnv"]

# env class -> how its oracle writes the reference answer (classes scored by a pure function).
PURE: dict[str, str] = {"gsm8k": "#### {gt}", "gsm8k_multi_turn": "#### {gt}", "aime": "\\boxed{{{gt}}}"}


def _load(tasks: list[dict[str, Any]] | str | Path) -> list[dict[str, Any]]:
    if isinstance(tasks, (str, Path)):
        p = Path(tasks)
        if not p.is_file():
            raise DatasetError(f"no SkyRL task file {str(p)!r}")
        rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    else:
        rows = list(tasks)
    if not rows:
        raise DatasetError("tasks is empty: expected SkyRL dataset rows with a 'prompt' list of messages")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("prompt"), list):
            raise DatasetError(f"task {i}: expected a row with 'prompt': [{{'role': ..., 'content': ...}}], got {r!r:.200}")
    return rows


class SkyRLEnv(HubEnv):
    default_id = "agentgym/SkyRL-v0"
    hub = "skyrl-gym"
    splits: ClassVar[tuple[str, ...]] = ()
    final_ends_episode = False
    extra_shaping: ClassVar[dict[str, float]] = {"step_reward": 1.0, "format_score": 0.0}
    instructions = "Answer in the final channel."

    def __init__(self, *, env_class: str = "gsm8k", tasks: list[dict[str, Any]] | str | Path | None = None,
                 env_config: dict[str, Any] | None = None, split: str | None = None, score_timeout: float = 60.0,
                 **kwargs: Any) -> None:
        require("skyrl_gym", "skyrl-gym")
        from skyrl_gym.envs.registration import registry

        if env_class not in registry:
            raise ConfigError(f"unknown SkyRL-gym env class {env_class!r}; known: {sorted(registry)}")
        if split is not None:
            raise ConfigError("SkyRL-gym datasets come one file per split (train.parquet, validation.parquet); "
                              "agentgym cannot split them: pass that split's rows as tasks=, not split=")
        if tasks is None:
            raise ConfigError("SkyRL-v0 needs tasks=: a list of SkyRL dataset rows or a JSONL file of them")
        super().__init__(**kwargs)
        self.env_class, self.env_config = env_class, dict(env_config or {})
        self.tasks = _load(tasks)
        self.row: dict[str, Any] | None = None
        self.score_timeout = float(score_timeout)
        self._worker: IsolatedScorer | None = None  # the scorer worker, started at the first answer
        self._session_open = False  # the worker's child holds this episode's SkyRL env

    def provenance(self) -> Provenance:
        pure = self.env_class in PURE
        return Provenance(
            hub=f"skyrl-gym {_version('skyrl-gym')}", source=self.env_class, replayable=pure,
            replay_note="its reward is a pure function of the answer text and the row" if pure else
            "it reaches outside services (retriever, SQL files, code runners) whose answers may change",
            oracle=pure, oracle_note="the row's ground truth in the env's answer format" if pure else
            "no scripted answer format is known for this env class")

    def oracle_action(self) -> list[int]:
        if self.env_class not in PURE or self.row is None:
            return super().oracle_action()
        spec = self.row.get("reward_spec") or self.row.get("reward_model") or {}
        return self.codec.final_ids(PURE[self.env_class].format(gt=spec.get("ground_truth")))

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        import skyrl_gym

        index = pick_index(options, rng, len(self.tasks))
        self._end_session()
        self.row = row = self.tasks[int(index)]
        try:  # the row's own prompt, read here; the env that scores answers lives in the worker
            env = skyrl_gym.make(self.env_class, env_config=self.env_config, extras=row)
        except (AssertionError, KeyError, TypeError) as e:  # SkyRL's own checks of the row
            raise DatasetError(f"task {index}: skyrl_gym.make({self.env_class!r}) refused the row: {e!r}") from None
        try:
            messages, _ = env.init(row["prompt"])
        finally:
            env.close()
        system = [m["content"] for m in messages if m.get("role") == "system"]
        user = [m["content"] for m in messages if m.get("role") != "system"]
        self.instructions = "\n\n".join([*system, type(self).instructions])  # type: ignore[misc]  # per task
        return Task(id=str(row.get("id", f"{self.env_class}/{index}")), prompt="\n\n".join(user),
                    meta={"index": int(index)})

    def score_source(self, answer: str) -> ToolResult:
        assert self.row is not None
        try:
            if not self._session_open:
                self._scorer().open(self.row)
                self._session_open = True
            try:
                out = self._scorer().call(answer)
            except SessionError as e:  # the env raised, timed out or died on this answer
                self._end_session()
                return ToolResult(f"SkyRL's env failed on this answer: {e}", terminal=True, outcome=0.0)
            reward = float(out["reward"])
            if out["done"]:
                self._end_session()
                outcome, numbers = self.guarded(lambda a: reward if a is answer else self._fresh_score(a), answer)
                detail = ", ".join(f"{k} {v:g}" for k, v in numbers.items())
                return ToolResult(f"SkyRL reward {reward:g} ({detail})", terminal=True, outcome=outcome)
        except (ScorerFault, SessionError) as e:
            self._end_session()
            return self.infra_fault(str(e))
        follow = "\n\n".join(out["observations"]) or "Continue."
        return ToolResult(follow, components=self._step_terms(reward))

    def guarded(self, score: Any, answer: str) -> tuple[float, dict[str, float]]:
        """HubEnv's guard on the outcome; for the env classes whose scoring agentgym knows
        (:data:`PURE`), only the correct-answer score is an outcome: a format score below it is 0."""
        if self.env_class not in PURE:
            return super().guarded(score, answer)
        return super().guarded(lambda a: float(float(score(a)) >= 1.0), answer)

    def degenerate_answers(self) -> list[str]:
        if self.env_class not in PURE or self.row is None:
            return []
        truth = str((self.row.get("reward_spec") or self.row.get("reward_model") or {}).get("ground_truth")).strip()
        return [PURE[self.env_class].format(gt=c) for c in ("0", "1") if c != truth]

    def _step_terms(self, reward: float) -> dict[str, float]:
        """A mid-episode reward as shaped terms. For :data:`PURE` classes a reward below the
        correct-answer score is a format score: reported as ``format_score`` (weight 0), never paid."""
        if self.env_class in PURE and reward < 1.0:
            return {"step_reward": 0.0, "format_score": reward}
        return {"step_reward": reward}

    def _scorer(self) -> IsolatedScorer:
        if self._worker is None:
            self._worker = shared_scorer("agentgym.environments.interop.hub_scorers:SkyRLScorer",
                                         {"env_class": self.env_class, "env_config": self.env_config},
                                         timeout=self.score_timeout)
        return self._worker

    def _end_session(self) -> None:
        if self._session_open:
            self._session_open = False
            if self._worker is not None:
                self._worker.close_session()

    def _fresh_score(self, answer: str) -> float:
        """What a fresh source env pays ``answer`` as its first step (the no-attempt guard's
        probes), in its own child of the worker."""
        assert self.row is not None
        try:
            (out,) = self._scorer().score(self.row, [answer])
        except SessionError:
            return 0.0
        return float(out["reward"])

    def on_close(self) -> None:
        self._end_session()
        if self._worker is not None:
            release_scorer(self._worker)
            self._worker = None
