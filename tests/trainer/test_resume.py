"""``--resume`` tells the truth: kill -9 a real run at a point, resume it, compare with a run never killed.

* killed inside the warm start: it continues from its last warm-start checkpoint, and the
  finished run (metrics and weights) is the uninterrupted one, bit for bit;
* killed during PPO: the warm start is not done again;
* killed before any checkpoint: ``--resume`` says so and starts over with a fresh metrics file;
* a resume that changes the run's identity (model.name, env.id, ...) is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym.trainer.cli import main
from agentgym.trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

RUN = ["--config", "cpu-quickstart", "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
       "log.eval_every=0", "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
       "rollout.samples_per_task=2", "log.eval_episodes=2", "log.eval_episodes_final=0", "log.eval_sampled=false",
       "sft.steps=24", "sft.oracle_steps=20", "sft.batch_size=2", "sft.checkpoint_every=4", "ppo.steps=3",
       "log.checkpoint_every=1", "log.keep_checkpoints=0", "controls=[]", "sft.min_wellformed=0"]
TIMING = {"t_step", "t_rollout", "t_update", "t_learner_busy", "gen_s", "env_s"}


def _start(run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agentgym.trainer.cli", *RUN, f"log.run_dir={run_dir}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _kill_when(proc: subprocess.Popen[str], run_dir: Path, phase: str, step: int, timeout: float = 600) -> None:
    """SIGKILL ``proc`` once metrics.jsonl holds a ``phase`` record at ``step`` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read() if proc.stdout else ''}"
        rows = read_metrics(run_dir, phase) if (run_dir / "metrics.jsonl").exists() else []
        if rows and rows[-1]["step"] >= step:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"no {phase} step {step} within {timeout} s")


def _finish(run_dir: Path, *extra: str) -> str:
    p = subprocess.run([sys.executable, "-m", "agentgym.trainer.cli", "--resume", str(run_dir), *extra],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _comparable(run_dir: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run_dir)]


def _weights(run_dir: Path) -> bytes:
    from agentgym.trainer.model.files import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    return (ckpt / "model" / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("whole")
    p = _start(run_dir)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out
    return run_dir


def test_a_kill_inside_the_warm_start_resumes_from_its_last_checkpoint_exactly(uninterrupted: Path,
                                                                                 tmp_path: Path) -> None:
    proc = _start(tmp_path)
    _kill_when(proc, tmp_path, "sft", 10)
    state = json.loads((tmp_path / "checkpoints" / "step-000000" / "state.json").read_text())
    assert state["sft_done"] is False and 8 <= state["sft_step"] < 24  # a checkpoint inside the warm start
    _finish(tmp_path)
    sft = [r["step"] for r in read_metrics(tmp_path, "sft")]
    assert sft == list(range(1, 25))  # each warm-start step once: nothing redone, nothing skipped
    assert _comparable(tmp_path) == _comparable(uninterrupted)
    assert _weights(tmp_path) == _weights(uninterrupted)


def test_a_kill_during_ppo_does_not_redo_the_warm_start(uninterrupted: Path, tmp_path: Path) -> None:
    proc = _start(tmp_path)
    _kill_when(proc, tmp_path, "train", 1)
    out = _finish(tmp_path)
    assert "warm start" not in out or "0/24" not in out
    assert [r["step"] for r in read_metrics(tmp_path, "sft")] == list(range(1, 25))
    assert _comparable(tmp_path) == _comparable(uninterrupted)


def test_resume_without_a_checkpoint_says_so_and_starts_a_clean_metrics_file(tmp_path: Path) -> None:
    proc = _start(tmp_path, "sft.checkpoint_every=0")
    _kill_when(proc, tmp_path, "sft", 2)
    assert not (tmp_path / "checkpoints").exists() or not list((tmp_path / "checkpoints").glob("step-*"))
    out = _finish(tmp_path, "sft.checkpoint_every=0", "ppo.steps=1")
    assert f"no checkpoint yet in {tmp_path}; starting over" in out
    assert [r["step"] for r in read_metrics(tmp_path, "sft")] == list(range(1, 25))  # no second "sft step 1"


def test_ctrl_c_says_where_a_resume_would_continue(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    rows: list[dict[str, object]] = []
    while not rows or int(rows[-1]["step"]) < 9:  # type: ignore[call-overload]
        assert proc.poll() is None
        time.sleep(0.05)
        rows = read_metrics(tmp_path, "sft") if (tmp_path / "metrics.jsonl").exists() else []
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted; continue from warm-start step" in out and f"--resume {tmp_path}" in out
    assert "Traceback" not in out


def test_a_resume_that_changes_the_model_is_refused(uninterrupted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (uninterrupted / "metrics.jsonl").read_text()
    assert main(["--resume", str(uninterrupted), "model.name=tiny:o200k_harmony"]) == 2
    err = capsys.readouterr().err
    assert "the run was made with model.name='tiny', not 'tiny:o200k_harmony'" in err
    assert main(["--resume", str(uninterrupted), "env.id=agentgym/Math-v1"]) == 2
    assert "env.id" in capsys.readouterr().err
    assert (uninterrupted / "metrics.jsonl").read_text() == before  # nothing touched
    assert os.path.exists(uninterrupted / "config.yaml")
