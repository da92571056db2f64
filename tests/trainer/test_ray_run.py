"""A whole trainer run on Ray rollout workers (``rollout.backend: ray``): the warm start with
its held-out stopping check, evaluations before, between and after the PPO steps (all on the
workers), and the workers' fault counts in every train record of metrics.jsonl.

The run starts its own local Ray instance from ``rollout.ray.init`` (what ``agentgym-train``
does) and shuts it down after.
"""

from __future__ import annotations

from pathlib import Path

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
