"""Scoring an episode: the final database state against the goal state, and the answer.

Sparse: 1 iff every goal table equals the goal canonically (``db.snapshot`` form) and, when
the task asks a question, the answer is right. Shaped terms (reported always, paid only in
shaped mode, weights in ``WebAPIEnv.extra_shaping``):

* ``progress``: the share of goal rows (rows the goal adds or changes relative to the
  fixture) present in the final state, in [0, 1];
* ``forbidden_writes``: rows the episode added or changed that the goal does not have.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agentgym.environments.webapi.wire import GOAL_TABLES, Snapshot

__all__ = ["check_answer", "evaluate", "format_answer"]

_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _rows(snap: Snapshot, table: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in snap.get(table, []))


def format_answer(spec: dict[str, Any]) -> str:
    """How the oracle states an expected answer (money with two decimals)."""
    v = spec["value"]
    return f"{v:.2f}" if spec["kind"] == "money" else str(v)


def check_answer(spec: dict[str, Any] | None, text: str) -> bool:
    """Is the value after the last ``ANSWER:`` in ``text`` the expected one?"""
    if spec is None:
        return True
    at = text.rfind("ANSWER:")
    if at < 0:
        return False
    given = text[at + len("ANSWER:"):].strip()
    if spec["kind"] in ("number", "money"):
        m = _NUM.search(given.replace("$", ""))
        if m is None:
            return False
        try:
            value = float(m.group().replace(",", ""))
        except ValueError:
            return False
        return abs(value - float(spec["value"])) < 0.005
    word = re.sub(r"[^a-z0-9_ -]", "", given.lower()).strip()
    return word == str(spec["value"]).lower()


def evaluate(goal: Snapshot, final: Snapshot, base: Snapshot, answer_spec: dict[str, Any] | None,
             answer: str) -> tuple[float, dict[str, float]]:
    """(outcome, components) for a final state; ``base`` is the fixture the episode began from."""
    goal_rows = reached = forbidden = 0
    same = True
    for table in GOAL_TABLES:
        g, f, b = _rows(goal, table), _rows(final, table), _rows(base, table)
        same &= g == f
        wanted, made = g - b, f - b  # rows the goal adds or changes; rows the episode did
        goal_rows += sum(wanted.values())
        reached += sum((wanted & made).values())
        forbidden += sum((made - wanted).values())
    answer_ok = check_answer(answer_spec, answer)
    comps = {"progress": reached / goal_rows if goal_rows else 0.0, "forbidden_writes": float(forbidden)}
    if answer_spec is not None:
        comps["answer_correct"] = float(answer_ok)
    return (1.0 if same and answer_ok else 0.0), comps
