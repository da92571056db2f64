"""A reasoning-gym dataset trains in a short agentgym-train run (tiny GPT-OSS, a few steps), and the
trained policy's agentgym-eval submission on the dataset's eval split verifies by replay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.environments.interop.conftest import require, write_suite

require("reasoning_gym")
pytest.importorskip("torch", reason="agentgym-train needs the [train] extra")

RG = "agentgym/ReasoningGym-v0"
KW = "{dataset: basic_arithmetic, config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1, size: 200}}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reasoning_gym_trains_with_agentgym_train_and_its_eval_submission_verifies(tmp_path: Path) -> None:
    run = tmp_path / "run"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    train = subprocess.run(
        ["nice", "-n", "10", str(bin_dir / "agentgym-train"), "--config", "cpu-quickstart",
         f"log.run_dir={run}", "seed=0", "threads=1", f"env.id={RG}", f"env.kwargs={KW}", "env.prompt=compact",
         "env.max_turns=1", "env.max_action_tokens=24", "sft.steps=0",
         "ppo.steps=3", "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_every=0",
         "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false", "log.plots=false",
         "controls=[]"],
        capture_output=True, text=True, timeout=800, env=env)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    from agentgym.trainer.metrics import read_metrics

    steps = read_metrics(run, "train")
    assert len(steps) == 3 and all("reward_mean" in r for r in steps)
    ckpts = sorted((run / "checkpoints").glob("step-*"))
    assert ckpts, f"no checkpoint in {run}"
    suite = write_suite(tmp_path, "rgeval", [{"id": RG, "kwargs": {
        "dataset": "basic_arithmetic", "split": "eval", "prompt": "compact", "max_turns": 1, "max_action_tokens": 24,
        "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "size": 200}},
        "tasks": [{"index": i} for i in range(3)]}])
    out = tmp_path / "sub.jsonl.gz"
    ev = subprocess.run([str(bin_dir / "agentgym-eval"), "--suite", str(suite), "--policy", "hf", "--policy-arg",
                         f"model={ckpts[-1]}", "--out", str(out), "--workers", "1", "--no-progress"],
                        capture_output=True, text=True, timeout=600, env=env)
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:]
    ver = subprocess.run([str(bin_dir / "agentgym"), "leaderboard", "verify", str(out), "--suite", str(suite),
                          "--no-progress"], capture_output=True, text=True, timeout=600, env=env)
    assert ver.returncode == 0 and "VERIFIED" in ver.stdout, ver.stdout[-2000:] + ver.stderr[-2000:]
