"""A whole trainer run on Ray rollout workers (``rollout.backend: ray``): the warm start with
its held-out stopping check, evaluations before, between and after the PPO steps (all on the
workers), and the workers' fault counts in every train record of metrics.jsonl.

A worker SIGKILLed while a PPO step collects: the death and the retry are counted in
metrics.jsonl, the run goes on, and the step's records (the retried unit's included) are the ones
an undisturbed collection gives.

Each run starts its own local Ray instance from ``rollout.ray.init`` (what ``agentgym-train``
does) and shuts it down after.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray collection needs the [scale] extra")
pytestmark = [pytest.mark.scale, pytest.mark.slow, pytest.mark.xdist_group("ray")]


def test_a_ray_run_warm_starts_evaluates_and_logs_its_worker_faults(tmp_path: Path) -> None:
    from agentgym.trainer.config import load_config
    from agentgym.trainer.metrics import read_metrics
    from agentgym.trainer.rollout.ray_collector import FAULT_COUNTS
    from agentgym.trainer.train import Trainer

    assert not ray.is_initialized()
    cfg = load_config("cpu-quickstart", [
        "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "controls=[]",
        "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "log.eval_every=1", "log.eval_episodes=2", "log.eval_episodes_final=0", "log.eval_sampled=false",
        "sft.steps=2", "sft.batch_size=2", "sft.oracle_steps=2", "sft.check_every=2", "sft.check_from=0", "sft.check_problems=2",
        "sft.check_samples=2", "sft.min_wellformed=0", "ppo.steps=2", f"log.run_dir={tmp_path}",
        "rollout.backend=ray", "rollout.ray.num_workers=2", "rollout.ray.episodes_per_call=2",
        "rollout.ray.cpus_per_worker=0.5",
        "rollout.ray.init={num_cpus: 2, object_store_memory: 200000000, log_to_driver: false}"])
    try:
        trainer = Trainer(cfg)
        try:
            trainer.run()
            deaths = trainer.rollouts.collector.total.worker_deaths
        finally:
            trainer.close()
    finally:
        ray.shutdown()
    assert [r["step"] for r in read_metrics(tmp_path, "sft")] == [1, 2]
    assert "check_pass_at_1" in read_metrics(tmp_path, "sft")[-1]  # the stopping check ran on the workers
    stages = [r.get("stage") for r in read_metrics(tmp_path, "eval")]
    assert stages[0] == "init" and "warm_start" in stages and stages.count("ppo") == 2, stages
    train = read_metrics(tmp_path, "train")
    assert [r["step"] for r in train] == [1, 2]
    assert all(f"ray_{k}" in r for r in train for k in FAULT_COUNTS)
    assert train[-1]["ray_worker_deaths"] == deaths == 0


class _KillAtFirstWait:
    """The ``ray`` module as a RayCollector sees it, except that its first ``wait`` SIGKILLs
    ``pid`` first: by then the step's units are dispatched and none has been read back, so the
    worker dies with its unit in flight (an OOM kill mid-step), whatever the machine's speed."""

    def __init__(self, pid: int) -> None:
        self.pid, self.killed = pid, False

    def __getattr__(self, name: str) -> Any:
        return getattr(ray, name)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        if not self.killed:
            self.killed = True
            os.kill(self.pid, signal.SIGKILL)
        return ray.wait(*args, **kwargs)


def test_a_worker_killed_mid_step_is_counted_and_its_unit_retried_to_the_same_records(tmp_path: Path) -> None:
    from agentgym.trainer.config import load_config
    from agentgym.trainer.metrics import read_metrics
    from agentgym.trainer.train import Trainer

    assert not ray.is_initialized()
    cfg = load_config("cpu-quickstart", [
        "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "controls=[]",
        "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "log.eval_every=0", "log.eval_episodes=2", "log.eval_episodes_final=0", "sft.steps=0",
        "sft.min_wellformed=0", "ppo.steps=2", f"log.run_dir={tmp_path}",
        "rollout.backend=ray", "rollout.ray.num_workers=2", "rollout.ray.episodes_per_call=2",
        "rollout.ray.cpus_per_worker=0.5", "rollout.ray.max_restarts=1",
        "rollout.ray.init={num_cpus: 2, object_store_memory: 200000000, log_to_driver: false}"])
    seen: dict[str, Any] = {}
    try:
        trainer = Trainer(cfg)
        col = trainer.rollouts.collector
        collect = col.collect

        def collect_killing_once(seeds: list[int], **kw: Any) -> Any:
            if "records" in seen or (kw.get("options") or {}).get("split") != "train":
                return collect(seeds, **kw)
            pid = col.worker_pids()[0]
            col.ray = killer = _KillAtFirstWait(pid or 0)
            try:
                trajs, stats = collect(seeds, **kw)
            finally:
                col.ray = ray
            seen["killed"], seen["last"] = killer.killed, (col.last.worker_deaths, col.last.retried_episodes,
                                                            col.last.failed_episodes)
            seen["records"] = [t.record().to_dict() for t in trajs]
            again, _ = collect(seeds, **kw)  # the same unit seeds and weights, nobody killed
            seen["unkilled"] = [t.record().to_dict() for t in again]
            seen["restarted"] = col.worker_pids()[0] != pid
            return trajs, stats

        col.collect = collect_killing_once
        try:
            trainer.run()
        finally:
            trainer.close()
    finally:
        ray.shutdown()
    assert seen["killed"] and seen["last"][0] == 1 and seen["last"][1] >= 1 and seen["last"][2] == 0, seen["last"]
    assert len(seen["records"]) == 4 and seen["records"] == seen["unkilled"]  # the retried unit's records too
    assert seen["restarted"]  # Ray restarted the worker under a new pid
    train = read_metrics(tmp_path, "train")
    assert [r["step"] for r in train] == [1, 2]  # the run finished
    assert train[0]["ray_worker_deaths"] == 1 and train[0]["ray_retried_episodes"] >= 1
    assert train[-1]["ray_worker_deaths"] == 1 and train[-1]["ray_failed_episodes"] == 0
