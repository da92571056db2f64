"""``agentgym/Math-v1``: answer a math problem in the final channel; the verifier decides.

Single-turn by default: no tools, the policy writes its answer (plain text or LaTeX, a
``\\boxed{}`` is fine) in the final channel and the episode ends. Sparse reward: 1.0 when
:func:`verify` says the answer is in the task's form (the result: a number where a number is
asked, a fraction in lowest terms, an evaluated expression; see :mod:`.answer_form`) and
equivalent to the reference, else 0.0, with the verdict's reason in
``info["tool_result"]["content"]`` (``not_final_form: ...`` for the question's expression
restated, ``echoed: ...`` for its text: the question is cut out of the answer before it is read).
Shaped reward adds ToolEnv's process terms, on a correct answer only: ``format`` (+0.1 for a
well-formed final message), ``malformed`` (-0.1 per unparsable action) and ``turn`` (-0.01 per
turn), never taking it below 1.0; a wrong, empty or missing answer earns 0 in both modes.

Splits: ``"train"`` and ``"eval"``, by a hash of the question (a dataset row may name its own);
``split=`` in the constructor, ``options={"split": ...}`` per episode. ``task_id`` is
``math/<family>/<12 hex digits of sha256(question)>`` (a dataset row's ``id``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.env import Task, ToolEnv
from agentgym.environments.math.dataset import DATASET_SPLITS, load_dataset
from agentgym.environments.math.generators import FAMILIES, LEVELS, Problem, generate
from agentgym.environments.math.verify import verify
from agentgym.errors import ConfigError
from agentgym.tools import ToolResult

__all__ = ["MathEnv"]

OPTION_KEYS = ("family", "level", "index", "split")


_SINGULAR = {"families": "family", "levels": "level"}


def _check_names(kind: str, given: Sequence[str] | str | None, known: Sequence[str]) -> tuple[str, ...]:
    if given is None:
        return tuple(known)
    names = (given,) if isinstance(given, str) else tuple(given)
    if not names:
        raise ConfigError(f"{kind} must not be empty; pass None for all of {list(known)}")
    for n in names:
        if n not in known:
            hint = difflib.get_close_matches(str(n), known, n=1)
            raise ConfigError(f"unknown {_SINGULAR.get(kind, kind)} {n!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                              + f" Known: {list(known)}")
    return names


class MathEnv(ToolEnv):
    default_id = "agentgym/Math-v1"
    splits = DATASET_SPLITS  # ("train", "eval")
    instructions = ("Solve the math problem. Answer in the final channel with only the final "
                    "answer (plain text or LaTeX; \\boxed{} is fine).")

    def __init__(
        self,
        *,
        families: Sequence[str] | str | None = None,
        levels: Sequence[str] | str | None = None,
        dataset: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.families = _check_names("families", families, tuple(FAMILIES))
        self.levels = _check_names("levels", levels, LEVELS)
        rows = load_dataset(dataset) if dataset is not None else None
        self._rows: dict[str, list[Problem]] | None = (
            None if rows is None else {s: [r for r in rows if r.split == s] for s in self.splits})
        self.problem: Problem | None = None

    @property
    def dataset(self) -> list[Problem] | None:
        """The dataset's problems of the constructor's split (None for generated problems)."""
        return None if self._rows is None else self._rows[str(self.split)]

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        self.problem = p = self.pick(rng, options)
        return Task(id=p.id, prompt=p.question, answer=p.answer,
                    meta={"family": p.family, "level": p.level, "expression": p.expression, "form": p.form,
                          "split": p.split})

    def score_final(self, answer: str) -> ToolResult:
        assert self.task is not None and self.problem is not None
        v = verify(answer, self.task.answer, self.problem.form, self.problem.given, question=self.task.prompt)
        return ToolResult(v.reason, terminal=True, outcome=1.0 if v.correct else 0.0)

    # ------------------------------------------------------------------ task choice
    def pick(self, rng: np.random.Generator, options: dict[str, Any]) -> Problem:
        """The episode's problem: options ``split``, ``family``, ``level`` and ``index`` pin it down.

        With ``index`` the problem is a pure function of (split, family, level, index) (or the
        split's dataset row), independent of the seed; without it, it is drawn from ``rng``.
        """
        unknown = set(options) - set(OPTION_KEYS)
        if unknown:
            raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: {list(OPTION_KEYS)}")
        split = str(options.get("split", self.split))
        index = options.get("index")
        if index is not None and (not isinstance(index, (int, np.integer)) or isinstance(index, bool)
                                  or index < 0):
            raise ConfigError(f"reset option 'index' must be a non-negative int, got {index!r}")
        if self._rows is not None:
            if "family" in options or "level" in options:
                raise ConfigError("reset options 'family'/'level' do not apply to a dataset; use 'index'")
            rows = self._rows[split]
            if not rows:
                raise ConfigError(f"the dataset has no {split!r} problems; give rows \"split\": \"{split}\" "
                                  "(without it a hash of the question decides: one in five is eval)")
            if index is None:
                return rows[int(rng.integers(len(rows)))]
            if index >= len(rows):
                raise ConfigError(f"index {index} is out of range for the {len(rows)} {split!r} problems "
                                  "of the dataset")
            return rows[int(index)]
        family = options.get("family")
        level = options.get("level")
        if family is not None:
            _check_names("families", family, tuple(FAMILIES))
        if level is not None:
            _check_names("levels", level, LEVELS)
        if index is not None:
            family = family or self.families[int(index) % len(self.families)]
            level = level or self.levels[int(index) % len(self.levels)]
            rng = np.random.default_rng([int(index), list(FAMILIES).index(family), LEVELS.index(level)])
        else:
            if family is None:
                family = self.families[int(rng.integers(len(self.families)))] if len(self.families) > 1 \
                    else self.families[0]
            if level is None:
                level = self.levels[int(rng.integers(len(self.levels)))] if len(self.levels) > 1 \
                    else self.levels[0]
        return generate(family, level, rng, split)
