"""Collection records the exact sampled tokens and the engine's log-probs; groups share tasks."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

import agentgym  # noqa: F401
from agentgym.trainer.algo.episode import NO_VERSION, Episode
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.rollout.collector import Collector, group_seeds, make_prefix_engine
from agentgym.trainer.rollout.engines.hf import HFEngine
from agentgym.trainer.rollout.staleness import VersionedEngine
from agentgym.trajectory import Trajectory

PAD = 263


class Recording:
    """A real engine that also keeps what it returned (to compare with the trajectories)."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.calls = engine, []

    def generate(self, prompts: list[list[int]], **kw: Any) -> list[Any]:
        out = self.engine.generate(prompts, **kw)
        self.calls.append((prompts, out, kw))
        return out

    def sync_weights(self, model: Any) -> None:
        self.engine.sync_weights(model)

    def close(self) -> None:
        self.engine.close()


def _env() -> gym.Env:
    return gym.make("agentgym/MathCalc-v1", max_turns=2, max_action_tokens=24)


def test_collect_records_exact_tokens_logprobs_and_groups() -> None:
    model = build_tiny_gptoss(264, seed=0)
    engine = Recording(make_prefix_engine(model, pad_id=PAD))
    col = Collector.from_factory(_env, 4, engine, max_new_tokens=24)
    seeds, groups = group_seeds(100, 2, 2)
    assert seeds == [100, 100, 101, 101] and groups == [0, 0, 1, 1]
    episodes, stats = col.collect(seeds, temperature=1.0, sample_seed=7)
    col.close()
    trajs = [e.traj for e in episodes]
    assert stats.episodes == 4 and stats.rounds == len(engine.calls) >= 1
    assert trajs[0].task_id == trajs[1].task_id and trajs[2].task_id == trajs[3].task_id
    # the stop ids handed to the engine are Harmony's <|call|> and <|return|>
    codec = _env().unwrapped.codec
    assert set(engine.calls[0][2]["stop_ids"]) == {codec.CALL, codec.RETURN}
    # turn k of episode i holds exactly what the engine sampled in round k, with its log-probs
    for k, (prompts, samples, _) in enumerate(engine.calls):
        active = [i for i, t in enumerate(trajs) if len(t.turns) > k]
        assert len(samples) == len(active)
        for i, s in zip(active, samples):
            t, turn = trajs[i], trajs[i].turns[k]
            assert prompts[active.index(i)] == t.tokens[:turn.action_start]  # no re-tokenization
            assert t.tokens[turn.action_start:turn.action_end] == s.tokens
            assert episodes[i].logprobs[turn.action_start:turn.action_end] == s.logprobs
    for e in episodes:  # log-probs exactly on the policy tokens
        t = e.traj
        assert all((lp is not None) == bool(m) for lp, m in zip(e.logprobs, t.policy_mask))
        # the trainer's log-probs of the same tokens agree with the engine's
        ids = torch.tensor([t.tokens])
        lp = policy_forward(model, ids).logprobs[0]
        mask = torch.tensor(t.policy_mask, dtype=torch.bool)
        eng = torch.tensor([x if x is not None else 0.0 for x in e.logprobs])
        assert torch.allclose(lp[mask], eng[mask], atol=1e-4)


def test_collect_returns_what_it_sampled_typed_and_leaves_the_envs_trajectory_alone() -> None:
    """The loop owns what it sampled: log-probs and versions are Episode fields; neither the env's
    own trajectory nor the copy handed back carries a log-prob or a version the collector wrote.
    A VersionedEngine's versions arrive typed, one per token; a plain engine's are None."""
    model = build_tiny_gptoss(264, seed=0)
    engine = VersionedEngine(make_prefix_engine(model, pad_id=PAD), version=3)
    col = Collector.from_factory(_env, 2, engine, max_new_tokens=24)
    episodes, _ = col.collect([5, 6], temperature=1.0, sample_seed=1)
    for e, env in zip(episodes, col.pool.envs):
        own = env.unwrapped.trajectory
        for t in (own, e.traj):
            assert t.logprobs == [None] * len(t.tokens)  # written by nobody
            assert "token_versions" not in t.meta and "policy_version" not in t.meta
            assert "infra_error" not in t.meta
        assert e.traj.tokens == own.tokens and e.traj is not own
        assert e.infra_error is None and e.failed is None and not e.lost
        assert len(e.logprobs) == len(e.versions or []) == len(e.traj.tokens)
        for lp, v, m in zip(e.logprobs, e.versions or [], e.traj.policy_mask):
            assert (lp is not None) == bool(m) and v == (3 if m else NO_VERSION)
        # the file keeps its format: a written episode carries its log-probs and versions
        rec = e.record()
        assert rec.logprobs == e.logprobs and rec.meta["token_versions"] == e.versions
        back = Episode.from_record(Trajectory.from_json(rec.to_json()))
        assert (back.logprobs, back.versions, back.traj.meta) == (e.logprobs, e.versions, e.traj.meta)
    engine.sync_weights(model)  # version 4, and a plain engine: no versions at all
    assert {v for e in col.collect([5], temperature=1.0, sample_seed=1)[0] for v in e.versions or []} \
        == {4, NO_VERSION}
    col.engine = engine.inner
    plain, _ = col.collect([5, 6], temperature=1.0, sample_seed=1)
    col.close()
    assert [e.versions for e in plain] == [None, None]
    assert [e.logprobs for e in plain] == [e.logprobs for e in episodes]  # same weights, same seeds


def test_prefix_engine_samples_what_the_plain_hf_engine_samples() -> None:
    """Also with repeated prompts (the samples of one task): each distinct suffix is prefilled
    once, and the repeats still sample on their own."""
    model = build_tiny_gptoss(264, seed=3)
    env = _env()
    prompts = []
    for i in range(4):
        obs, _ = env.reset(seed=i)
        prompts.append(obs.tolist() + ([] if i % 2 else list(range(40, 40 + 3 * i))))
    prompts += [prompts[1], prompts[2], prompts[1]]
    stop = list(env.unwrapped.codec.stop_ids)
    a = HFEngine(model, pad_id=PAD).generate(prompts, max_new_tokens=12, temperature=1.0,
                                             stop_ids=stop, seed=5)
    batch_one = []  # forwards at batch 1: the shared prefix, then one per distinct suffix
    hook = model.register_forward_pre_hook(
        lambda _m, args, kw: batch_one.append(1) if kw["input_ids"].shape[0] == 1 else None, with_kwargs=True)
    b = make_prefix_engine(model, pad_id=PAD).generate(prompts, max_new_tokens=12, temperature=1.0,
                                                       stop_ids=stop, seed=5)
    hook.remove()
    assert len(batch_one) == 1 + 4
    for x, y in zip(a, b):
        assert x.tokens == y.tokens and x.finish_reason == y.finish_reason
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4
    assert len({tuple(b[i].tokens) for i in (1, 4, 6)}) > 1  # prompt 1's three samples: not one copy


def test_decoding_attention_equals_the_models_eager_attention() -> None:
    """Sampling uses gqa_eager_attention (no repeat_kv copy of the cache); the logits must be
    GPT-OSS's eager sink attention's, with padding, the sliding window and the cache."""
    from transformers import DynamicCache

    from agentgym.trainer.rollout.engines.hf import decoding_attention

    model = build_tiny_gptoss(264, seed=4, sliding_window=8).eval()
    ids = torch.randint(0, 256, (3, 21))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding
    pos = (mask.cumsum(-1) - 1).clamp(min=0)

    def run() -> torch.Tensor:
        cache = DynamicCache(config=model.config)
        first = model(input_ids=ids[:, :17], attention_mask=mask[:, :17], position_ids=pos[:, :17],
                      past_key_values=cache, use_cache=True).logits
        rest = [model(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], position_ids=pos[:, t:t + 1],
                      past_key_values=cache, use_cache=True).logits for t in range(17, 21)]
        return torch.cat([first, *rest], dim=1)

    with torch.no_grad():
        eager = run()
        previous = decoding_attention(model.config)
        assert previous == "eager" and model.config._attn_implementation != "eager"
        fast = run()
        model.config._attn_implementation = previous
    real = mask.bool()
    assert (fast - eager)[real].abs().max() < 1e-5
