"""What a Lookup-v1 episode did about its faults, read back from its trajectory.

A policy at the edge of this task succeeds when it calls a failed code again; one that never
does succeeds only on the samples that met no fault, and then a group's successes say nothing
about recovery (what RL here is meant to learn). :func:`fault_record` counts, per episode, the
calls answered with the transient fault, how many of them the next turn called again with the
same code, and whether the episode solved its task; ``bench/lookup_recovery.py`` runs it over a
trained policy's episodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.scores import solved

from .env import UNAVAILABLE

__all__ = ["FaultRecord", "fault_record", "fault_summary"]

_CODE = re.compile(r'"code"\s*:\s*"([^"]*)"')


@dataclass(frozen=True, slots=True)
class FaultRecord:
    faults: int  # lookup calls answered with the transient fault
    retried: int  # of those, the ones the next turn called again with the same code
    success: bool  # the final answer was the chain's end


def _code(traj: Any, turn: Any, decode: Callable[[Sequence[int]], str]) -> str | None:
    m = _CODE.search(decode(traj.tokens[turn.action_start:turn.action_end]))
    return m.group(1).strip() if m else None


def fault_record(traj: Any, decode: Callable[[Sequence[int]], str]) -> FaultRecord:
    """``traj``: a Lookup-v1 :class:`~agentgym.trajectory.Trajectory`; ``decode``: its tokenizer's
    ``decode``."""
    turns, faults, retried = traj.turns, 0, 0
    for i, t in enumerate(turns):
        if t.tool != "lookup" or UNAVAILABLE not in decode(traj.tokens[t.action_end:t.obs_end]):
            continue
        faults += 1
        nxt = turns[i + 1] if i + 1 < len(turns) else None
        if nxt is not None and nxt.tool == "lookup" and _code(traj, nxt, decode) == _code(traj, t, decode):
            retried += 1
    success = bool(turns) and solved(turns[-1].components.get("outcome", 0.0))
    return FaultRecord(faults, retried, success)


def fault_summary(records: Sequence[FaultRecord]) -> dict[str, int]:
    """Episode counts: with and without a fault, solved among each, and the faults met and retried."""
    hit = [r for r in records if r.faults]
    clean = [r for r in records if not r.faults]
    return {"episodes": len(records), "met_fault": len(hit), "met_fault_solved": sum(r.success for r in hit),
            "no_fault": len(clean), "no_fault_solved": sum(r.success for r in clean),
            "faults": sum(r.faults for r in records), "faults_retried": sum(r.retried for r in records)}
