"""Trajectories -> tensors, and the shared-prefix forward against the plain one."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import agentgym  # noqa: F401
from agentgym.environments.math.oracle import oracle_actions
from agentgym.errors import NonFiniteError, TrainerError
from agentgym.trainer.algo.batch import make_batch, shared_prefix_len
from agentgym.trainer.algo.episode import NO_VERSION, Episode
from agentgym.trainer.learner import batch_forward
from agentgym.trainer.model.gptoss import ValueHead, build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.rollout.demos import demonstrations
from agentgym.trajectory import Trajectory, Turn

PAD = 263


def _traj(reward: float = 1.0, truncated: bool = False) -> Episode:
    # prompt 3 | action 2 | obs 2 | action 3
    t = Trajectory("agentgym/X-v0", 0, "t", "byte")
    t.append([1, 2, 3], policy=False)
    t.prompt_len = 3
    t.append([10, 11], policy=True)
    t.append([4, 5], policy=False)
    t.turns.append(Turn(3, 5, 7, 0.25))
    t.append([12, 13, 14], policy=True)
    t.turns.append(Turn(7, 10, 10, reward))
    t.terminated, t.truncated = not truncated, truncated
    return Episode(t, [None] * 3 + [-0.5, -0.25] + [None] * 2 + [-1.0, -2.0, -3.0])


def test_layout_masks_rewards_and_pad_column() -> None:
    short = Trajectory("agentgym/X-v0", 1, "u", "byte")
    short.append([1, 2, 3], policy=False)
    short.append([20], policy=True)
    short.turns.append(Turn(3, 4, 4, -1.0))
    b = make_batch([_traj(), Episode(short, [None] * 3 + [-0.1])], [0, 0], pad_id=PAD)
    assert b.input_ids.shape == (2, 11)  # longest row + one pad column
    assert b.input_ids[0, :10].tolist() == [1, 2, 3, 10, 11, 4, 5, 12, 13, 14]
    assert b.input_ids[0, 10] == PAD and b.input_ids[1, 4:].eq(PAD).all()
    assert b.policy_mask[0].tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0]
    assert b.attention_mask[1].tolist() == [1, 1, 1, 1] + [0] * 7
    # each turn's reward on its last action token
    assert b.rewards[0].tolist() == [0, 0, 0, 0, 0.25, 0, 0, 0, 0, 1.0, 0]
    assert b.rewards[1, 3] == -1.0 and b.scores.tolist() == [1.25, -1.0]
    assert b.behaviour_logp[0, 3:5].tolist() == [-0.5, -0.25] and b.behaviour_logp[0, 5] == 0
    assert b.lengths.tolist() == [10, 4]
    assert b.versions is None  # no episode records its versions


def test_versions_come_from_the_episodes_and_need_every_one() -> None:
    a, b = _traj(), _traj()
    a.versions = [NO_VERSION] * 3 + [2, 2] + [NO_VERSION] * 2 + [3, 3, 3]
    assert make_batch([a, b], [0, 1], pad_id=PAD).versions is None  # b has none: no versions at all
    b.versions = [NO_VERSION] * 10
    v = make_batch([a, b], [0, 1], pad_id=PAD).versions
    assert v is not None and v.shape == (2, 11) and v[0].tolist() == [*a.versions, NO_VERSION]
    with pytest.raises(TrainerError, match="10 tokens, 9 log-probs"):
        Episode(a.traj, a.logprobs[:-1])


def test_truncated_flag_and_select() -> None:
    b = make_batch([_traj(truncated=True), _traj()], [0, 1], pad_id=PAD)
    assert b.truncated.tolist() == [True, False]
    sub = b.select([1])
    assert len(sub) == 1 and sub.input_ids.shape == (1, 11) and sub.group_ids.tolist() == [1]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_reward_raises(bad: float) -> None:
    with pytest.raises(NonFiniteError, match="reward"):
        make_batch([_traj(reward=bad)], [0], pad_id=PAD)


def test_prefix_forward_matches_full_forward_values_and_gradients() -> None:
    env = gym.make("agentgym/MathCalc-v1")
    b = make_batch([Episode.from_record(t) for t in demonstrations(env, oracle_actions, [0, 1, 2, 3])],
                   [0, 1, 2, 3], pad_id=PAD)
    assert shared_prefix_len(b.input_ids, b.policy_mask, b.lengths) > 500  # system + developer
    model = build_tiny_gptoss(264, seed=1)
    head = ValueHead(128)
    torch.nn.init.normal_(head.proj.weight, std=0.1)
    results = []
    for fn in ("full", "prefix"):
        model.zero_grad()
        head.zero_grad()
        if fn == "full":
            out = policy_forward(model, b.input_ids, b.attention_mask, value_head=head)
        else:
            out = batch_forward(model, b, value_head=head)
        m = b.policy_mask
        loss = -(out.logprobs * m).sum() + (out.values * m).pow(2).sum() - (out.entropy * m).sum()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in [*model.parameters(), *head.parameters()]
                           if p.grad is not None])
        results.append(((out.logprobs * m).detach(), (out.values * m).detach(), grads))
    (lp0, v0, g0), (lp1, v1, g1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5)
    assert torch.allclose(v0, v1, atol=1e-4)
    assert float((g0 - g1).norm() / g0.norm()) < 1e-4


def test_micro_batches_cover_every_row_once_within_the_budget() -> None:
    from agentgym.trainer.algo.batch import micro_batches

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 200, (37,), generator=g)
    rows = torch.randperm(37, generator=g)[:30]
    parts = micro_batches(lengths, rows, max_tokens=600)
    assert sorted(torch.cat(parts).tolist()) == sorted(rows.tolist())
    for part in parts:
        width = int(lengths[part].max()) + 1
        assert width * len(part) <= 600 or len(part) == 1
    # bucketing: longest rows first, each micro-batch's rows no longer than the previous one's
    maxes = [int(lengths[p].max()) for p in parts]
    assert maxes == sorted(maxes, reverse=True)
    padded = sum((int(lengths[p].max()) + 1) * len(p) for p in parts)
    assert padded < (int(lengths[rows].max()) + 1) * len(rows)  # less padding than one batch
    assert [p.tolist() for p in micro_batches(lengths, rows, 0)] == [rows.tolist()]
