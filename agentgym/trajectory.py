"""The trajectory record: one episode, exactly as the policy saw it.

Shared by environments (which write it), the trainer (which learns from it) and the
leaderboards (which replay it). ``tokens`` is the whole append-only stream; ``policy_mask[i]``
is 1 where the policy sampled ``tokens[i]`` (only those get policy loss); ``logprobs[i]`` is
the behaviour log-probability the sampling engine reported for it (None where unknown or
not sampled). Serialises to one JSON object per line and round-trips losslessly.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError

__all__ = ["Trajectory", "Turn", "read_jsonl", "write_jsonl"]

SCHEMA_VERSION = 1


@dataclass(slots=True)
class Turn:
    action_start: int  # index of the turn's first action token in Trajectory.tokens
    action_end: int  # one past its last action token (== obs start)
    obs_end: int  # one past the last observation token the env appended
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    tool: str | None = None  # the tool called, if any
    error: str | None = None  # parse or tool error code, if any


@dataclass(slots=True)
class Trajectory:
    env_id: str
    seed: int | None
    task_id: str
    tokenizer: str
    tokens: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    prompt_len: int = 0
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)  # env options, reward mode, budgets

    # --- building (used by ToolEnv) ---------------------------------------------------
    def append(self, ids: list[int], *, policy: bool) -> None:
        self.tokens += ids
        self.policy_mask += [1 if policy else 0] * len(ids)
        self.logprobs += [None] * len(ids)

    def set_action_logprobs(self, turn: int, logprobs: Iterable[float]) -> None:
        """Attach the engine's per-token log-probs to the action tokens of ``turn``."""
        t = self.turns[turn]
        lps = [float(x) for x in logprobs]
        if len(lps) != t.action_end - t.action_start:
            raise ConfigError(
                f"turn {turn} has {t.action_end - t.action_start} action tokens but "
                f"{len(lps)} log-probs arrived; pass one log-prob per sampled token"
            )
        self.logprobs[t.action_start : t.action_end] = lps

    def copy(self) -> Trajectory:
        """A deep copy, ~30x faster than ``copy.deepcopy`` (the rollout copies every finished
        episode out of its env): the token lists hold scalars only, so a list copy is deep."""
        return Trajectory(self.env_id, self.seed, self.task_id, self.tokenizer, list(self.tokens),
                          list(self.policy_mask), list(self.logprobs), self.prompt_len,
                          [Turn(t.action_start, t.action_end, t.obs_end, t.reward, dict(t.components), t.tool, t.error)
                           for t in self.turns],
                          self.terminated, self.truncated, _copied(self.meta))

    # --- reading -------------------------------------------------------------------------
    @property
    def total_reward(self) -> float:
        return math.fsum(t.reward for t in self.turns)

    @property
    def infra_error(self) -> str | None:
        """Why the episode was lost to an infrastructure fault (``meta["infra_error"]``), or None:
        such an episode has no outcome, and is neither trained on nor scored."""
        note = self.meta.get("infra_error")
        return str(note) if note else None

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.policy_mask)

    def actions(self) -> Iterator[list[int]]:
        """The action token ids of each turn, in order (what a replay feeds to ``step``)."""
        for t in self.turns:
            yield self.tokens[t.action_start : t.action_end]

    # --- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        version = d.pop("schema", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise ConfigError(f"trajectory schema {version} is not supported (expected {SCHEMA_VERSION})")
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)

    def to_json(self) -> str:
        # allow_nan=False: a NaN reward is a bug upstream, not something to persist silently.
        return json.dumps(self.to_dict(), allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        return cls.from_dict(json.loads(line))


_SCALARS = (int, float, str, bool, type(None))


def _copied(v: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars); anything else goes to copy.deepcopy."""
    if type(v) in _SCALARS:
        return v
    if type(v) is dict:
        return {k: _copied(x) for k, x in v.items()}
    if type(v) is list:
        return [x if type(x) in _SCALARS else _copied(x) for x in v]
    return copy.deepcopy(v)


def write_jsonl(path: str | Path, trajectories: Iterable[Trajectory], *, append: bool = False) -> int:
    """Write one trajectory per line; returns how many were written."""
    n = 0
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(t.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[Trajectory]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_json(line))
            except (json.JSONDecodeError, TypeError, KeyError) as e:
                raise ConfigError(f"{path}:{lineno}: not a trajectory record ({e})") from e
    return out
