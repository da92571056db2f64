"""The shipped CodeFix tasks: loading, splits and levels.

``data/tasks.jsonl.gz`` is produced once by :mod:`.build_tasks` (see its docstring for how
bugs are chosen and verified) and committed. Splits are by HumanEval problem, so no eval
problem is ever seen in training, whatever the level:

* ``eval``: problems ``HumanEval/N`` with ``N % 5 == 0`` (33 problems);
* ``train``: all others.

Levels: 1 = one bug, 2 = two bugs, 3 = one bug plus a docstring note that vouches for the
buggy line.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, DatasetError

__all__ = ["LEVELS", "SPLITS", "TASKS_PATH", "CodeFixTask", "load_tasks", "select_tasks"]

TASKS_PATH = Path(__file__).parent / "data" / "tasks.jsonl.gz"
SPLITS = ("train", "eval")
LEVELS = (1, 2, 3)
_FORMAT = "agentgym-codefix-tasks"


@dataclass(frozen=True, slots=True)
class CodeFixTask:
    id: str  # "HumanEval/17/L2/0": problem, level, variant
    problem: str  # "HumanEval/17"
    number: int
    split: str
    level: int
    variant: int
    entry_point: str
    mutations: tuple[dict[str, Any], ...]  # kind, description, line (in the canonical file)
    buggy_source: str  # solution.py at the start of the episode
    canonical_source: str  # the reference fix (what the oracle writes)
    support: str  # trusted problem statement and helpers, for the judge
    test_preamble: str
    units: tuple[str, ...]  # hidden test units
    n_visible: int  # the first n_visible units are in test_visible.py
    visible_tests: str  # test_visible.py
    start_passed: int  # hidden units the buggy source passes (measured at build time)
    visible_fails: bool  # whether the visible tests already catch the bug

    @property
    def n_units(self) -> int:
        return len(self.units)

    @property
    def start_pass_rate(self) -> float:
        return self.start_passed / len(self.units)

    def judge_spec(self) -> dict[str, Any]:
        return {"entry_point": self.entry_point, "support": self.support,
                "test_preamble": self.test_preamble, "units": list(self.units)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CodeFixTask:
        return cls(d["id"], d["problem"], int(d["number"]), d["split"], int(d["level"]),
                   int(d["variant"]), d["entry_point"], tuple(d["mutations"]), d["buggy_source"],
                   d["canonical_source"], d["support"], d["test_preamble"], tuple(d["units"]),
                   int(d["n_visible"]), d["visible_tests"], int(d["start_passed"]),
                   bool(d["visible_fails"]))


@functools.lru_cache(maxsize=4)
def load_tasks(path: Path = TASKS_PATH) -> tuple[CodeFixTask, ...]:
    """Every task in the file, in file order (problem number, then level, then variant)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise DatasetError(
            f"expected the CodeFix task file at {path}, could not read it ({e}); rebuild it with "
            "`python -m agentgym.environments.codefix.build_tasks`") from e
    if not lines or lines[0].get("format") != _FORMAT:
        raise DatasetError(f"expected a {_FORMAT} header line in {path}, got {str(lines[:1])[:200]}")
    return tuple(CodeFixTask.from_json(d) for d in lines[1:])


def select_tasks(split: str, level: int | None, path: Path = TASKS_PATH) -> tuple[CodeFixTask, ...]:
    """The tasks of one split, at one level or (``level=None``) all levels."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    if level is not None and level not in LEVELS:
        raise ConfigError(f"level must be one of {LEVELS} or None (all), got {level!r}")
    out = tuple(t for t in load_tasks(path) if t.split == split and (level is None or t.level == level))
    if not out:
        raise DatasetError(f"no CodeFix tasks for split={split!r} level={level!r} in {path}")
    return out
