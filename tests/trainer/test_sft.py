"""Warm start: oracle demonstrations are real, rewarded trajectories; SFT learns only the
policy tokens."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import agentgym
from agentgym.errors import ConfigError
from agentgym.trainer.algo.batch import make_batch, micro_batches
from agentgym.trainer.algo.episode import Episode
from agentgym.trainer.config import SFTConfig
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.rollout.demos import demonstrations, find_oracle
from agentgym.trainer.sft import make_teacher, sft_step
from tests.trainer.defect_teachers import flip_sign, guess_answer

PAD = 263


@pytest.mark.parametrize("env_id, turns", [("agentgym/Math-v1", 1), ("agentgym/MathCalc-v1", 2)])
def test_oracle_demonstrations_are_solved_episodes(env_id: str, turns: int) -> None:
    env = gym.make(env_id)
    demos = demonstrations(env, find_oracle(env_id), [0, 1, 2])
    for t in demos:
        assert t.terminated and t.total_reward == 1.0 and len(t.turns) == turns
        # the calculator call's result is environment text: not a policy token
        if turns == 2:
            obs = t.tokens[t.turns[0].action_end:t.turns[0].obs_end]
            assert sum(t.policy_mask[t.turns[0].action_end:t.turns[0].obs_end]) == 0 and obs


def test_sft_loss_ignores_environment_tokens_and_decreases() -> None:
    env = gym.make("agentgym/MathCalc-v1")
    demos = demonstrations(env, find_oracle("agentgym/MathCalc-v1"), list(range(8)))
    model = build_tiny_gptoss(264, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # changing a tool-result token changes no loss term it is the *target* of
    b = make_batch([Episode.from_record(t) for t in demos[:2]], [0, 1], pad_id=PAD)
    assert b.policy_mask[:, :b.lengths.min()].sum() < b.lengths.sum()
    first = sft_step(model, opt, demos, pad_id=PAD, max_grad_norm=1.0, device=torch.device("cpu"))
    for _ in range(6):
        last = sft_step(model, opt, demos, pad_id=PAD, max_grad_norm=1.0, device=torch.device("cpu"))
    assert last["loss"] < first["loss"] - 0.5
    assert 0 < last["demo_token_p"] <= 1


def test_unknown_env_has_no_oracle() -> None:
    with pytest.raises(ConfigError, match="no oracle"):
        find_oracle("agentgym/CodeFix-v1")


def test_teachers_are_the_ones_the_env_declares() -> None:
    for env_id in ("agentgym/Math-v1", "agentgym/MathCalc-v1"):
        assert sorted(agentgym.capabilities(env_id).teachers) == ["oracle"]  # no defect in the product
    with pytest.raises(ConfigError, match=r"declares the teachers \['oracle'\]; fix: sft.teacher=oracle"):
        make_teacher("agentgym/MathCalc-v1", SFTConfig(teacher="defect-guesser"))
    with pytest.raises(ConfigError, match=r"sft.teacher_kwargs.skip_tool: not accepted by the teacher 'oracle' "
                                         r".*it takes none"):
        make_teacher("agentgym/MathCalc-v1", SFTConfig(teacher="oracle", teacher_kwargs={"skip_tool": 0.5}))


def test_an_env_declares_its_own_teachers_with_their_options(defect_teachers: None) -> None:
    teachers = agentgym.capabilities("agentgym/MathCalc-v1").teachers
    assert sorted(teachers) == ["defect-blind-guesser", "defect-guesser", "defect-sign-flipper", "oracle"]
    make_teacher("agentgym/MathCalc-v1", SFTConfig(teacher="defect-guesser", teacher_kwargs={"skip_tool": 0.5}))
    with pytest.raises(ConfigError, match=r"teacher_kwargs.skip_tool: not accepted by the teacher "
                                         r"'defect-sign-flipper' .*expected one of \['sign_error'\]"):
        make_teacher("agentgym/MathCalc-v1", SFTConfig(teacher="defect-sign-flipper",
                                                       teacher_kwargs={"skip_tool": 0.5}))


def test_guess_answer_is_one_digit_off_unless_right() -> None:
    rng = np.random.default_rng(0)
    for answer in ("85", "-7/12", "1000", "7"):
        for _ in range(50):
            g = guess_answer(answer, rng, right=0.0)
            assert g != answer and len(g) == len(answer)
            assert sum(a != b for a, b in zip(g, answer)) == 1
            assert not (g[0] == "0" and len(g) > 1 and g[1].isdigit())  # no leading zero
        assert guess_answer(answer, rng, right=1.0) == answer


def test_guesser_skips_the_tool_on_its_fraction_and_is_reproducible(defect_teachers: None) -> None:
    env = gym.make("agentgym/MathCalc-v1", reward_mode="sparse")
    sc = SFTConfig(teacher="defect-guesser", teacher_kwargs={"skip_tool": 0.5, "guess_right": 0.0})
    seeds = list(range(40))
    demos = demonstrations(env, make_teacher("agentgym/MathCalc-v1", sc), seeds)
    guessed = [t for t in demos if len(t.turns) == 1]
    used_tool = [t for t in demos if len(t.turns) == 2]
    assert 10 <= len(guessed) <= 30 and len(guessed) + len(used_tool) == len(demos)
    assert all(t.total_reward == 0.0 for t in guessed)  # wrong guesses earn nothing (sparse)
    assert all(t.total_reward == 1.0 for t in used_tool)
    again = demonstrations(env, make_teacher("agentgym/MathCalc-v1", sc), seeds)
    assert [t.tokens for t in again] == [t.tokens for t in demos]
    blind = demonstrations(env, make_teacher("agentgym/MathCalc-v1", SFTConfig(
        teacher="defect-blind-guesser", teacher_kwargs={"skip_tool": 1.0})), seeds[:4])
    shown = demonstrations(env, make_teacher("agentgym/MathCalc-v1", SFTConfig(
        teacher="defect-guesser", teacher_kwargs={"skip_tool": 1.0})), seeds[:4])
    # showing the work is an extra analysis message before the same one-turn answer
    assert all(len(b.tokens) < len(s.tokens) for b, s in zip(blind, shown))


def test_flip_sign_flips_the_first_numbers_sign() -> None:
    assert flip_sign("78 - 83") == "-78 - 83"
    assert flip_sign("12 * 4 - 3") == "-12 * 4 - 3"
    assert flip_sign("-3 + 4") == "3 + 4"
    assert flip_sign(flip_sign("8 + 5 * 10")) == "8 + 5 * 10"


def test_sign_flipper_slips_on_its_fraction_and_copies_everything_else(defect_teachers: None) -> None:
    env = gym.make("agentgym/MathCalc-v1", reward_mode="sparse")
    text = env.unwrapped.tokenizer.decode
    sc = SFTConfig(teacher="defect-sign-flipper", teacher_kwargs={"sign_error": 0.5})
    seeds = list(range(60))
    demos = demonstrations(env, make_teacher("agentgym/MathCalc-v1", sc), seeds)
    oracle = demonstrations(env, find_oracle("agentgym/MathCalc-v1"), seeds)
    slipped = 0
    for d, o in zip(demos, oracle):
        assert len(d.turns) == 2  # every demo calls the tool, then answers
        if d.tokens == o.tokens:
            assert d.total_reward == 1.0
            continue
        slipped += 1
        assert d.total_reward == 0.0  # the flipped sign gives a wrong result ...
        call, o_call = (text(t.tokens[t.turns[0].action_start:t.turns[0].action_end]) for t in (d, o))
        assert call.replace('"-', '"', 1) == o_call  # the same call with a leading minus
        # ... which the answer repeats exactly: the copy skills are shown on every episode
        result = text(d.tokens[d.turns[0].action_end:d.turns[0].obs_end])
        answer = text(d.tokens[d.turns[1].action_start:d.turns[1].action_end])
        got = result.split("<|message|>")[-1].split("<|end|>")[0]
        assert answer.split("<|message|>")[-1].startswith(got)
    assert 15 <= slipped <= 45
    again = demonstrations(env, make_teacher("agentgym/MathCalc-v1", sc), seeds)
    assert [t.tokens for t in again] == [t.tokens for t in demos]


def test_sft_micro_batches_by_length_give_the_one_batch_step(defect_teachers: None) -> None:
    env = gym.make("agentgym/MathCalc-v1", prompt="compact")  # short prompt: lengths differ a lot
    sc = SFTConfig(teacher="defect-blind-guesser", teacher_kwargs={"skip_tool": 0.5})
    demos = demonstrations(env, make_teacher("agentgym/MathCalc-v1", sc), list(range(16)))
    b = make_batch([Episode.from_record(t) for t in demos], list(range(len(demos))), pad_id=PAD)
    assert len(micro_batches(b.lengths, torch.arange(len(b)), 2000)) >= 3  # the budget really splits
    updates, stats = [], []
    for max_tokens in (0, 2000):  # 0: one padded batch
        model = build_tiny_gptoss(264, seed=0)
        before = [q.detach().clone() for q in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=1.0)  # the step is the (clipped) gradient itself
        stats.append(sft_step(model, opt, demos, pad_id=PAD, max_grad_norm=1.0, device=torch.device("cpu"),
                              max_tokens=max_tokens))
        updates.append(torch.cat([(b - q.detach()).flatten() for b, q in zip(before, model.parameters())]))
    assert stats[0]["loss"] == pytest.approx(stats[1]["loss"], rel=1e-5)
    assert stats[0]["demo_token_p"] == pytest.approx(stats[1]["demo_token_p"], rel=1e-5)
    torch.testing.assert_close(updates[0], updates[1], rtol=1e-5, atol=1e-6)
