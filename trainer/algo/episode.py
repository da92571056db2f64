"""One collected episode as the loop holds it: the env's record and what the loop sampled into it.

    episodes, stats = collector.collect(seeds, temperature=1.0, sample_seed=7)
    e = episodes[0]
    e.traj          # the env's Trajectory, copied out of the env: the collector writes nothing into it
    e.logprobs      # one per token of e.traj.tokens: the engine's log-prob of a sampled token, else None
    e.versions      # one per token: the policy version that sampled it (NO_VERSION on env tokens),
                    # or None when the engine is not versioned (a synchronous step stamps it later)
    e.infra_error   # why an infrastructure fault lost the episode (no outcome), or None
    e.failed        # why a Ray collection lost it (a worker died, no retry), or None

The contract: every collector (the local ``Collector``, the Ray collector and its workers, the
tensor-parallel ``GroupCollector``, the asynchronous ``Producer``) returns ``Episode`` records;
the env's trajectory stays the env's (tokens, policy mask, turns, rewards, the env's own
``meta``). What the loop knows about an episode (which log-probs the engine reported, which
weights sampled each token, whether the infrastructure lost it) is a typed field here, read by
the batcher, the staleness metrics, the evaluations and the doctor. An env may still report a
fault of its own in ``traj.meta["infra_error"]`` (``agentgym/env.py``, remote env servers); the
collector carries it over into :attr:`Episode.infra_error`.

The on-disk format (``trajectories.jsonl``, one :class:`~agentgym.trajectory.Trajectory` per
line) is unchanged: :meth:`Episode.record` writes the behaviour log-probs into the record's
``logprobs`` and the versions into ``meta["token_versions"]`` / ``meta["policy_version"]``;
:meth:`Episode.from_record` reads such a record back (or wraps a demonstration, which has none).

Lives in ``algo`` (below ``rollout``) because the batcher reads it and the wings import downward.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym.errors import TrainerError
from agentgym.trajectory import Trajectory

__all__ = ["NO_VERSION", "Episode"]

NO_VERSION = -1  # the version of a token the env wrote (prompt, tool results): no policy sampled it


@dataclass(slots=True)
class Episode:
    traj: Trajectory
    logprobs: list[float | None]  # (len(traj.tokens),) behaviour log-prob of each sampled token
    versions: list[int] | None = None  # (len(traj.tokens),) policy version per token, NO_VERSION elsewhere
    infra_error: str | None = None
    failed: str | None = None
    policy_version: int | None = None  # the oldest weights that sampled a token of it (set by the run)

    def __post_init__(self) -> None:
        n = len(self.traj.tokens)
        if len(self.logprobs) != n or (self.versions is not None and len(self.versions) != n):
            raise TrainerError(
                f"an Episode needs one log-prob (and one version, if any) per token of its trajectory: "
                f"{n} tokens, {len(self.logprobs)} log-probs, "
                f"{'no' if self.versions is None else len(self.versions)} versions; the collector must "
                "extend them as the env appends tokens")

    @property
    def lost(self) -> bool:
        """No outcome: an infrastructure fault or a failed Ray collection ended it."""
        return bool(self.infra_error) or self.failed is not None

    def record(self) -> Trajectory:
        """The episode as the file stores it (``trajectories.jsonl``): a copy of ``traj`` with the
        behaviour log-probs in ``logprobs`` and, when known, the versions in ``meta``."""
        out = self.traj.copy()
        out.logprobs = list(self.logprobs)
        if self.policy_version is not None:
            out.meta["policy_version"] = self.policy_version
        if self.versions is not None:
            out.meta["token_versions"] = list(self.versions)
        if self.infra_error:
            out.meta["infra_error"] = self.infra_error
        return out

    @classmethod
    def from_record(cls, traj: Trajectory) -> Episode:
        """The inverse of :meth:`record`: a written episode (or a demonstration, which carries no
        log-probs) as the loop holds it. ``traj`` is copied; its log-probs become the typed field."""
        t = traj.copy()
        versions = t.meta.pop("token_versions", None)
        policy_version = t.meta.pop("policy_version", None)
        lps, t.logprobs = t.logprobs, [None] * len(t.tokens)
        return cls(t, lps, None if versions is None else [int(v) for v in versions], traj.infra_error,
                   None, None if policy_version is None else int(policy_version))
