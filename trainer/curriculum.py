"""Adaptive curriculum: which difficulty level each training task is drawn from.

    sampler = CurriculumSampler(cfg.curriculum, seed=cfg.seed)
    options = sampler.task_options(step, tasks, base=cfg.env.train_options)  # one dict per task
    ...collect with those options...
    sampler.update(levels_of_episodes, successes)   # may promote

Levels are the environment's own (a reset option, ``level`` by default: Math-v1 and
MathCalc-v1 take ``easy``/``medium``/``hard``), listed easy to hard in
``curriculum.levels``. Training starts at the first; the *frontier* is the hardest level
unlocked so far. A level is passed when the success rate of its last ``curriculum.window``
training episodes reaches ``curriculum.promote_at``; the next level then becomes the
frontier (the window starts empty again). So that the easy levels are not forgotten, each
task is drawn from a passed level (uniformly) with probability ``curriculum.review`` and from
the frontier otherwise. Every draw is a function of ``(seed, step)``, and the sampler's state
(frontier, window, promotions) goes into checkpoints, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.errors import ConfigError

__all__ = ["CurriculumConfig", "CurriculumSampler"]


@dataclass
class CurriculumConfig:
    levels: list[Any] = field(default_factory=list)
    """Difficulty levels, easy to hard (e.g. [easy, medium, hard]); empty = no curriculum."""
    option: str = "level"
    """The reset option the level is passed as."""
    promote_at: float = 0.6
    """Success rate over the frontier's last ``window`` episodes that passes it."""
    window: int = 32
    """Training episodes of the frontier level the success rate is measured on."""
    review: float = 0.25
    """Probability that a task is drawn from an already passed level (against forgetting)."""

    def validate(self) -> None:
        if len(set(map(str, self.levels))) != len(self.levels):
            raise ConfigError(f"curriculum.levels: expected distinct levels, got {self.levels}")
        if not 0 < self.promote_at <= 1:
            raise ConfigError(f"curriculum.promote_at: expected a success rate in (0, 1], got {self.promote_at}")
        if self.window < 1:
            raise ConfigError(f"curriculum.window: expected >= 1 episode, got {self.window}")
        if not 0 <= self.review < 1:
            raise ConfigError(f"curriculum.review: expected a probability in [0, 1), got {self.review}")


class CurriculumSampler:
    """Levels per task, promotion on success (module doc). ``enabled`` is False without levels."""

    def __init__(self, cfg: CurriculumConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.seed = seed
        self.frontier = 0  # index into cfg.levels of the hardest unlocked level
        self.recent: list[float] = []  # outcomes of the frontier's latest episodes (<= window)
        self.promotions: list[int] = []  # the step at which each level after the first opened

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.levels)

    @property
    def level(self) -> Any:
        return self.cfg.levels[self.frontier]

    def task_levels(self, step: int, tasks: int) -> list[Any]:
        """The level of each of the ``tasks`` tasks of PPO step ``step``."""
        rng = np.random.default_rng([self.seed, step, 0xC0FFEE])
        review = rng.random(tasks) < self.cfg.review
        lower = rng.integers(0, max(self.frontier, 1), size=tasks)
        return [self.cfg.levels[int(lo)] if (r and self.frontier > 0) else self.level
                for r, lo in zip(review, lower)]

    def task_options(self, step: int, tasks: int, base: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """``base`` reset options plus each task's level (see :meth:`task_levels`)."""
        return [{**(base or {}), self.cfg.option: lv} for lv in self.task_levels(step, tasks)]

    def update(self, step: int, levels: Sequence[Any], successes: Sequence[float]) -> bool:
        """Record the outcomes of one step's episodes; True when the frontier moved up."""
        for lv, ok in zip(levels, successes):
            if lv == self.level:
                self.recent.append(float(ok))
        self.recent = self.recent[-self.cfg.window:]
        if (len(self.recent) >= self.cfg.window and self.frontier + 1 < len(self.cfg.levels)
                and sum(self.recent) / len(self.recent) >= self.cfg.promote_at):
            self.frontier += 1
            self.recent = []
            self.promotions.append(step)
            return True
        return False

    def metrics(self) -> dict[str, float]:
        """``curriculum_level`` (frontier index) and its windowed success rate."""
        rate = sum(self.recent) / len(self.recent) if self.recent else 0.0
        return {"curriculum_level": float(self.frontier), "curriculum_success": rate}

    def state_dict(self) -> dict[str, Any]:
        return {"frontier": self.frontier, "recent": list(self.recent), "promotions": list(self.promotions)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frontier = int(state["frontier"])
        self.recent = [float(x) for x in state["recent"]]
        self.promotions = [int(x) for x in state["promotions"]]
