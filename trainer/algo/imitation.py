"""Which episodes an imitation baseline learns from: the successful ones (RFT), the best of each
group (best-of-group), and the groups whose rewards differ (the informative ones for a group baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..metrics import episode_success

__all__ = ["best_of_group", "informative_groups", "successful"]


def successful(trajs: Sequence[Any]) -> list[Any]:
    """The episodes that solved their task (``episode_success``): what RFT learns from."""
    return [t for t in trajs if episode_success(t)]


def best_of_group(trajs: Sequence[Any], groups: Sequence[int]) -> list[Any]:
    """Each group's highest-reward episode (the first of a tie), where it scored above 0: what the
    best-of-group arm (RAFT, reward-ranked fine-tuning) learns from. With a 0/1 reward it keeps one
    success per solved task, where RFT keeps them all; with partial credit, the best attempt."""
    best: dict[int, Any] = {}
    for t, g in zip(trajs, groups, strict=True):
        if t.total_reward > 0 and (g not in best or t.total_reward > best[g].total_reward):
            best[g] = t
    return list(best.values())


def informative_groups(trajs: Sequence[Any], groups: Sequence[int]) -> list[int]:
    """Indices of the episodes whose group's scores are not all equal (dynamic sampling: a
    uniform group has zero advantage under a group baseline and only dilutes the token mean)."""
    scores: dict[int, set[float]] = {}
    for t, g in zip(trajs, groups, strict=True):
        scores.setdefault(g, set()).add(round(t.total_reward, 9))
    return [i for i, g in enumerate(groups) if len(scores[g]) > 1]


