"""Episodes -> padded (B, T) tensors for the PPO update. No re-tokenization: the rows are
the trajectories' token streams exactly as the policy sampled and saw them; the behaviour
log-probs and versions come from the :class:`~agentgym.trainer.algo.episode.Episode` records
(what the collector sampled), never from the env's trajectory.

Layout (right padding, one extra pad column so every row has a position *after* its last
token; ``ForwardOut.values`` at that column is the value of the final state, which is what a
truncated episode bootstraps from; the forward pass of a batch is
:meth:`agentgym.trainer.learner.Learner.forward`):

* ``input_ids``      (B, T) long   the episode's tokens, then ``pad_id``
* ``attention_mask`` (B, T) long   1 on real tokens
* ``policy_mask``    (B, T) float  1 where the policy sampled the token (Trajectory.policy_mask)
* ``behaviour_logp`` (B, T) float  the engine's log-prob of each sampled token (0 elsewhere; Episode.logprobs)
* ``rewards``        (B, T) float  each turn's reward on the last action token of that turn
* ``scores``         (B,)   float  episode return (sum of turn rewards)
* ``group_ids``      (B,)   long   samples of the same task share an id (group baseline)
* ``lengths``        (B,)   long   real tokens per row
* ``truncated``      (B,)   bool   hit a budget (bootstrap with the value head)
* ``routes``   (B, T, L, k) long   the engine's experts per token and layer, with routing
                                   replay (``rollout.routing_replay``), else None
* ``versions``       (B, T) long   the policy version that sampled each token (-1 elsewhere),
                                   when every episode records them (``Episode.versions``)

What :func:`~agentgym.trainer.update.compute_advantages` adds before the update, all (B, T):
``advantages``, ``returns`` (GAE), ``old_logp`` (when the update needs them before its first
pass), ``old_values`` (GAE) and ``ref_logp`` (the KL reference's log-probs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from agentgym.errors import NonFiniteError
from agentgym.trajectory import Trajectory

from .episode import NO_VERSION, Episode

__all__ = ["Batch", "batch_versions", "make_batch", "micro_batches", "shared_prefix_len"]

@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    policy_mask: torch.Tensor
    behaviour_logp: torch.Tensor
    rewards: torch.Tensor
    scores: torch.Tensor
    group_ids: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    routes: torch.Tensor | None = None
    versions: torch.Tensor | None = None
    # set by update.compute_advantages, before the update (None: not needed by this recipe)
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: torch.Tensor | Sequence[int]) -> Batch:
        """The sub-batch of ``rows`` (episodes), trimmed to its longest row + 1 pad column."""
        idx = torch.as_tensor(rows, dtype=torch.long)
        width = int(self.lengths[idx].max()) + 1
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                v = v[idx]
                v = v[:, :width] if v.dim() >= 2 else v
            out[f.name] = v
        return Batch(**out)

    def to(self, device: str | torch.device) -> Batch:
        moved: dict[str, Any] = {f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                                 for f in fields(self)}
        return Batch(**moved)

    @property
    def num_policy_tokens(self) -> int:
        return int(self.policy_mask.sum())


def _reward_position(traj: Trajectory, turn_index: int) -> int | None:
    """Index of the token that carries a turn's reward: its last action token, or the last
    policy token before it when the turn appended nothing (a rejected action)."""
    t = traj.turns[turn_index]
    if t.action_end > t.action_start:
        return t.action_end - 1
    for i in range(t.action_start - 1, traj.prompt_len - 1, -1):
        if traj.policy_mask[i]:
            return i
    return None


def make_batch(episodes: Sequence[Episode], group_ids: Sequence[int], *, pad_id: int) -> Batch:
    """Stack trajectories into a :class:`Batch` (see the module doc for the layout).

    Raises :class:`NonFiniteError` if a reward is NaN or infinite: that is a bug in the
    environment or reward function, and training on it would poison the weights.
    """
    B = len(episodes)
    if B == 0 or len(group_ids) != B:
        raise ValueError(f"need >= 1 episode and one group id each, got {B} and {len(group_ids)}")
    trajectories = [e.traj for e in episodes]
    lengths = [len(t.tokens) for t in trajectories]
    T = max(lengths) + 1
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention = torch.zeros(B, T, dtype=torch.long)
    policy = torch.zeros(B, T)
    behaviour = torch.zeros(B, T)
    rewards = torch.zeros(B, T)
    scores = torch.zeros(B)
    for b, (traj, ep) in enumerate(zip(trajectories, episodes)):
        n = lengths[b]
        input_ids[b, :n] = torch.tensor(traj.tokens, dtype=torch.long)
        attention[b, :n] = 1
        policy[b, :n] = torch.tensor(traj.policy_mask, dtype=torch.float32)
        behaviour[b, :n] = torch.tensor([lp if lp is not None else 0.0 for lp in ep.logprobs])
        for k, turn in enumerate(traj.turns):
            if not math.isfinite(turn.reward):
                raise NonFiniteError(
                    f"episode {b} ({traj.env_id}, seed {traj.seed}) turn {k} has reward "
                    f"{turn.reward}; expected a finite number. Check the environment's "
                    "score_final/tool outcomes and reward shaping weights.")
            pos = _reward_position(traj, k)
            if pos is not None:
                rewards[b, pos] += turn.reward
        scores[b] = traj.total_reward
    return Batch(
        input_ids=input_ids, attention_mask=attention, policy_mask=policy,
        behaviour_logp=behaviour, rewards=rewards, scores=scores,
        group_ids=torch.tensor(list(group_ids), dtype=torch.long),
        lengths=torch.tensor(lengths, dtype=torch.long),
        truncated=torch.tensor([t.truncated and not t.terminated for t in trajectories]),
        versions=batch_versions(episodes, T),
    )


def micro_batches(lengths: torch.Tensor, rows: torch.Tensor, max_tokens: int) -> list[torch.Tensor]:
    """Split ``rows`` (episode indices) into micro-batches of at most ``max_tokens`` padded
    tokens each (rows x (longest row + 1)), by length (bucketing): sorted longest first and
    filled greedily, so that rows of similar length share a micro-batch and padding stays
    small. A row longer than the budget forms a micro-batch of its own. Deterministic: ties
    keep the order of ``rows``. The micro-batches come back in the order they were cut.
    """
    if max_tokens <= 0:
        return [rows]
    lens = lengths[rows] + 1  # padded width of a micro-batch whose longest row is this one
    order = torch.sort(lens, descending=True, stable=True).indices
    out: list[torch.Tensor] = []
    cur: list[int] = []
    width = 0
    for i in order.tolist():
        w = max(width, int(lens[i]))
        if cur and w * (len(cur) + 1) > max_tokens:
            out.append(rows[cur])
            cur, w = [], int(lens[i])
        cur.append(i)
        width = w
    if cur:
        out.append(rows[cur])
    return out


def batch_versions(episodes: Sequence[Episode], width: int) -> torch.Tensor | None:
    """(B, width) long: each token's policy version (``NO_VERSION`` elsewhere), or None when an
    episode has no record of its versions."""
    known = [e.versions for e in episodes if e.versions is not None]
    if not episodes or len(known) != len(episodes):
        return None
    out = torch.full((len(episodes), width), NO_VERSION, dtype=torch.long)
    for b, v in enumerate(known):
        out[b, :len(v)] = torch.tensor(v, dtype=torch.long)
    return out


def shared_prefix_len(input_ids: torch.Tensor, policy_mask: torch.Tensor, lengths: torch.Tensor) -> int:
    """Length of the token prefix every row shares and the policy never sampled (the system +
    developer prompt of an environment, ~600 tokens for the byte tokenizer)."""
    same = (input_ids == input_ids[:1]).all(0)  # (T,)
    n = int(same.long().cumprod(0).sum())
    first_policy = policy_mask.bool().any(0).nonzero()
    if first_policy.numel():
        n = min(n, int(first_policy[0]))
    return max(0, min(n, int(lengths.min()) - 1))


