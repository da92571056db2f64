"""Ray collection: the same records as the local collector, and no lost work when a worker dies.

One local Ray instance for the module (2 CPUs, a small object store, no dashboard). Workers are
killed with SIGKILL mid-rollout, as an OOM kill or a lost node would do it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401
from agentgym.errors import TrainerError
from agentgym.trainer.rollout.collector import Collector
from agentgym.trainer.rollout.engines.replay import ReplayEngine
from agentgym.trainer.rollout.ray_collector import RayCollector, WorkerSpec, drop_failed, replayable

ray = pytest.importorskip("ray", reason="Ray collection needs the [scale] extra")
# One Ray at a time: ray.init() with no address may join another worker's local cluster.
pytestmark = [pytest.mark.scale, pytest.mark.xdist_group("ray")]

ENV = "agentgym/MathCalc-v1"
SEEDS = list(range(200, 212))


def make_env() -> gym.Env:
    return gym.make(ENV, max_turns=4)


class SlowReplay(ReplayEngine):
    """The replay policy, taking ``delay`` seconds per batched generate call (a slow model)."""

    delay = 0.4

    def generate(self, prompts: list[list[int]], **kw: Any) -> Any:
        time.sleep(self.delay)
        return super().generate(prompts, **kw)


@pytest.fixture(scope="module")
def engine() -> ReplayEngine:
    base = ReplayEngine.from_oracle(make_env, SEEDS[:-2])  # the last two seeds get malformed answers
    return SlowReplay(base.table, base.fallback)


@pytest.fixture(scope="module")
def local_records(engine: ReplayEngine) -> list[dict[str, Any]]:
    col = Collector.from_factory(make_env, len(SEEDS), engine, max_new_tokens=96)
    trajs, _ = col.collect(SEEDS, temperature=1.0, sample_seed=5)
    col.close()
    return [t.record().to_dict() for t in trajs]


@pytest.fixture(scope="module", autouse=True)
def ray_instance() -> Iterator[None]:
    ray.init(num_cpus=2, object_store_memory=300 * 2**20, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


class _Announced(gym.Wrapper):
    """Appends "pid seed" to a file at each reset: the test sees inside the workers which episode
    started where, and kills on that event rather than after a guessed delay (CI is slow)."""

    def __init__(self, env: gym.Env, path: str) -> None:
        super().__init__(env)
        self.path = path

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {seed}\n")
        return super().reset(seed=seed, options=options)


def _collector(engine: ReplayEngine, announce: str | None = None, **kw: Any) -> RayCollector:
    kw.setdefault("num_workers", 2)
    kw.setdefault("episodes_per_call", 2)
    factory = make_env if announce is None else (lambda: _Announced(make_env(), announce))
    return RayCollector(WorkerSpec(factory, lambda _model: engine, max_new_tokens=96), env_id=ENV, **kw)


def _kill_when_reset(pid: int, path: str, seed: int | None = None, timeout: float = 120.0) -> threading.Thread:
    """SIGKILLs ``pid`` once it has reset an episode (``seed``, or any): mid-rollout by construction."""

    def announced(line: str) -> bool:
        got_pid, _, got_seed = line.partition(" ")
        return got_pid == str(pid) and (seed is None or got_seed == str(seed))

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                if any(announced(line) for line in Path(path).read_text().splitlines()):
                    os.kill(pid, signal.SIGKILL)
                    return
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_ray_collects_the_same_records_as_the_local_collector(engine, local_records) -> None:
    col = _collector(engine, num_workers=2, episodes_per_call=3)
    try:
        trajs, stats = col.collect(SEEDS, temperature=1.0, sample_seed=5)
        assert [t.record().to_dict() for t in trajs] == local_records
        assert stats.episodes == len(SEEDS) and stats.sampled_tokens > 0
        assert col.last.worker_deaths == col.last.failed_episodes == 0
        assert sum(t.traj.total_reward for t in trajs) == len(SEEDS) - 2  # the oracle's episodes are solved
    finally:
        col.close()


def test_a_killed_worker_loses_only_its_unit_which_is_retried_elsewhere(engine, local_records, tmp_path) -> None:
    col = _collector(engine, announce=str(tmp_path / "resets"), max_restarts=1)
    try:
        pids = col.worker_pids()
        timer = _kill_when_reset(pids[0] or 0, str(tmp_path / "resets"))  # mid-rollout
        trajs, _ = col.collect(SEEDS, temperature=1.0, sample_seed=5)
        timer.join()
        assert col.last.worker_deaths == 1 and col.last.retried_episodes >= 1
        assert col.last.failed_episodes == 0
        assert [t.record().to_dict() for t in trajs] == local_records  # nothing lost, nothing changed
        assert col.worker_pids()[0] != pids[0]  # Ray restarted it; it takes work again
        trajs, _ = col.collect(SEEDS[:4], temperature=1.0, sample_seed=5)
        assert [t.record().to_dict() for t in trajs] == local_records[:4]
    finally:
        col.close()


def test_episodes_that_may_have_had_side_effects_are_failed_and_masked(engine, local_records, tmp_path) -> None:
    col = _collector(engine, announce=str(tmp_path / "resets"), retry="never", max_restarts=0)
    try:
        pids = col.worker_pids()
        timer = _kill_when_reset(pids[0] or 0, str(tmp_path / "resets"))
        trajs, _ = col.collect(SEEDS, temperature=1.0, sample_seed=5)
        timer.join()
        failed = [i for i, t in enumerate(trajs) if t.failed is not None]
        assert 1 <= len(failed) <= 2 and col.last.failed_episodes == len(failed)  # one unit in flight
        assert "worker 0 died" in str(trajs[failed[0]].failed) and trajs[failed[0]].traj.seed == SEEDS[failed[0]]
        for i, t in enumerate(trajs):  # every other episode is intact, including the dead worker's earlier ones
            if i not in failed:
                assert t.record().to_dict() == local_records[i]
        groups = [i // 2 for i in range(len(SEEDS))]
        kept, kept_groups, dropped = drop_failed(trajs, groups)
        assert dropped == len(failed) and len(kept) == len(kept_groups) == len(SEEDS) - len(failed)
        assert all(t.failed is None for t in kept)
        # max_restarts=0: the dead worker is retired, the other carries on alone
        assert col.alive == [False, True]
        trajs, _ = col.collect(SEEDS[:4], temperature=1.0, sample_seed=5)
        assert [t.record().to_dict() for t in trajs] == local_records[:4]
    finally:
        col.close()


def test_when_every_worker_is_gone_the_rest_is_reported_failed_and_kept_work_is_returned(engine, tmp_path) -> None:
    col = _collector(engine, announce=str(tmp_path / "resets"), num_workers=1, episodes_per_call=2, max_restarts=0)
    try:
        pid = col.worker_pids()[0]
        # one worker: the second unit starts only after the driver has the first one back
        timer = _kill_when_reset(pid or 0, str(tmp_path / "resets"), seed=SEEDS[2])
        trajs, _ = col.collect(SEEDS, temperature=1.0, sample_seed=5)
        timer.join()
        reasons = [t.failed for t in trajs]
        assert reasons[0] is None and reasons[1] is None  # collected before the death: kept
        assert reasons[-1] == "no live Ray workers"
        with pytest.raises(TrainerError, match="all 2 episodes of this step failed"):
            drop_failed(trajs[-2:], [0, 0])
    finally:
        col.close()


def test_the_retry_rule() -> None:
    assert replayable("agentgym/CodeFix-v1", {}) and replayable("agentgym/WebAPI-v1", {})
    assert not replayable("agentgym/WebAPI-v1", {"server_url": "http://127.0.0.1:9"})
    assert not replayable("agentgym/Remote-v0", {"url": "ws://127.0.0.1:1/ws"})
    assert replayable("agentgym/Remote-v0", {}, extra=["agentgym/Remote-v0"])
    assert not replayable(ENV, {}, "never") and replayable("my/Env-v0", {}, "always")


def test_the_trainer_collects_on_ray_workers_with_the_current_weights(tmp_path) -> None:
    import torch

    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    small = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
             "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
             "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=2"]
    cfg = load_config("cpu-quickstart", [*small, f"log.run_dir={tmp_path}", "ppo.steps=2", "ppo.lr=1e-2",
                                         "ppo.warmup_steps=1", "ppo.entropy_coef=0.5", "rollout.backend=ray",
                                         "rollout.ray.num_workers=2", "rollout.ray.episodes_per_call=2"])
    trainer = Trainer(cfg)
    try:
        for step in range(2):
            before = [p.detach().clone() for p in trainer.learner.model.parameters()]
            m = trainer.train_step(step)
            assert any(not torch.equal(a, p) for a, p in zip(before, trainer.learner.model.parameters()))
            # the workers sampled from the driver's weights of this very step (a large lr makes
            # stale weights show up as a large engine/trainer log-prob gap)
            assert m["mismatch_abs_dlogp_max"] < 1e-3, (step, m["mismatch_abs_dlogp_max"])
            assert m["episodes_failed"] == 0
    finally:
        trainer.close()


def test_an_env_server_killed_mid_rollout_fails_only_the_episodes_in_flight(engine, local_records) -> None:
    from agentgym.serving.env_launch import launch

    pytest.importorskip("websockets")
    servers = [launch(ENV)]
    url = servers[0].url

    def make_remote() -> gym.Env:
        return gym.make("agentgym/Remote-v0", url=url, env_id=ENV, max_turns=4, reconnect_attempts=6)

    col = RayCollector(WorkerSpec(make_remote, lambda _model: engine, max_new_tokens=96),
                       env_id="agentgym/Remote-v0", num_workers=2, episodes_per_call=2)

    def crash_and_restart() -> None:
        servers[0].stop(signal.SIGKILL)
        servers.append(launch(ENV, port=servers[0].port))

    try:
        col.worker_pids()
        timer = threading.Timer(0.6, crash_and_restart)
        timer.start()
        trajs, _ = col.collect(SEEDS, temperature=1.0, sample_seed=5)
        timer.join()
        failed = [i for i, t in enumerate(trajs) if t.failed is not None]
        # the units in flight (one per worker) lost their sessions; Remote-v0 is not replayable
        assert 1 <= len(failed) <= 4 and col.last.env_failures in (1, 2) and col.last.worker_deaths == 0
        assert all("env service failed" in str(trajs[i].failed) for i in failed)
        for i, t in enumerate(trajs):  # the rest, before and after the restart, as the local env gives
            if i not in failed:
                assert t.record().to_dict() == local_records[i]
    finally:
        col.close()
        for s in servers:
            s.stop(signal.SIGKILL)
