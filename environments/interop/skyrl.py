"""``agentgym/SkyRL-v0``: a SkyRL-gym text env (``skyrl_gym.make(env_class, extras=row)``) as a token env.

    env = gym.make("agentgym/SkyRL-v0", env_class="gsm8k", tasks="gsm8k_train.jsonl")

``tasks`` is a list of SkyRL dataset rows (or a JSONL file of them): ``{"prompt": [messages],
"reward_spec": {"ground_truth": ...}, "extra_info": {...}}``, the format SkyRL's trainer reads.
One row per episode (reset option ``index``, else drawn from the seed). The row's system message
is the developer instructions, its user messages the task. Each final-channel answer is the
text SkyRL's ``env.step`` receives; its observations come back as the user's next message
(multi-turn envs such as ``gsm8k_multi_turn``) until SkyRL says ``done``. The outcome is the
reward of the last step; earlier steps' rewards are the shaped term ``step_reward``. Tools are
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
    extra_shaping: ClassVar[dict[str, float]] = {"step_reward": 1.0}
    instructions = "Answer in the final channel."

    def __init__(self, *, env_class: str = "gsm8k", tasks: list[dict[str, Any]] | str | Path | None = None,
                 env_config: dict[str, Any] | None = None, split: str | None = None, **kwargs: Any) -> None:
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
        self.source: Any = None
        self.row: dict[str, Any] | None = None
        self._last_reward = 0.0

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
        self.row = row = self.tasks[int(index)]
        if self.source is not None:
            self.source.close()
        try:
            self.source = skyrl_gym.make(self.env_class, env_config=self.env_config, extras=row)
        except (AssertionError, KeyError, TypeError) as e:  # SkyRL's own checks of the row
            raise DatasetError(f"task {index}: skyrl_gym.make({self.env_class!r}) refused the row: {e!r}") from None
        messages, _ = self.source.init(row["prompt"])
        system = [m["content"] for m in messages if m.get("role") == "system"]
        user = [m["content"] for m in messages if m.get("role") != "system"]
        self.instructions = "\n\n".join([*system, type(self).instructions])  # type: ignore[misc]  # per task
        self._last_reward = 0.0
        return Task(id=str(row.get("id", f"{self.env_class}/{index}")), prompt="\n\n".join(user),
                    meta={"index": int(index)})

    def score_source(self, answer: str) -> ToolResult:
        out = self.source.step(answer)
        reward = float(out["reward"])
        if out["done"]:
            outcome, numbers = self.guarded(lambda a: reward if a is answer else self._fresh_score(a), answer)
            detail = ", ".join(f"{k} {v:g}" for k, v in numbers.items())
            return ToolResult(f"SkyRL reward {reward:g} ({detail})", terminal=True, outcome=outcome)
        follow = "\n\n".join(m["content"] for m in out["observations"]) or "Continue."
        return ToolResult(follow, components={"step_reward": reward})

    def _fresh_score(self, answer: str) -> float:
        """What a fresh source env pays ``answer`` as its first step (the no-attempt guard's probes)."""
        import skyrl_gym

        assert self.row is not None
        env = skyrl_gym.make(self.env_class, env_config=self.env_config, extras=self.row)
        try:
            env.init(self.row["prompt"])
            return float(env.step(answer)["reward"])
        finally:
            env.close()

    def on_close(self) -> None:
        if self.source is not None:
            self.source.close()
