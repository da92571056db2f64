"""Nothing a run has is lost, and no run quietly does nothing: faults injected into real runs.

* overrides given with ``--resume`` are saved: a run extended with ``ppo.steps=5`` and killed
  (``kill -9``) at step 3 resumes to step 5 without being told again;
* SIGTERM (a scheduler's preemption) writes a checkpoint at the next step boundary, inside the
  warm start too, and exits with 143 and the ``--resume`` command; the resumed run finishes;
* a kill during the warm-start save leaves no ``warm_start/`` folder, only a stray that the
  resume removes before it writes the warm start again, complete; a warm start cut short by an
  older version is written again (or refused) on resume, and ``sft.load`` of one is refused;
* a full disk (a small tmpfs) is one line, exit 1, and leaves no partial folder; once there is
  space, ``--resume`` continues.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym.errors import CheckpointError
from agentgym.trainer.cli import PREEMPTED, main
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.model.files import latest_checkpoint, model_dir_problem

pytestmark = pytest.mark.slow

RUN = ["--config", "cpu-quickstart", "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
       "log.eval_every=0", "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
       "rollout.samples_per_task=2", "log.eval_episodes=2", "log.eval_episodes_final=0", "log.eval_sampled=false",
       "sft.steps=0", "ppo.steps=3", "log.checkpoint_every=1", "log.keep_checkpoints=0", "controls=[]",
       "sft.min_wellformed=0"]
WARM = ["sft.steps=6", "sft.oracle_steps=6", "sft.batch_size=2", "sft.checkpoint_every=2"]

# A real process that is SIGKILLed half-way through writing the warm start's AdamW moments.
KILLED_IN_WARM_START_SAVE = """
import os, signal, sys
import agentgym.trainer.learner as learner  # where the warm start's save looks save_moments up
real = learner.save_moments
def dying(opt, model, path):
    real(opt, model, path)
    with open(path, "r+b") as f:
        f.truncate(10)  # half written
    os.kill(os.getpid(), signal.SIGKILL)
learner.save_moments = dying
from agentgym.trainer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentgym.trainer.cli", *args]


def _wait_for(proc: subprocess.Popen[str], run_dir: Path, phase: str, step: int, timeout: float = 600) -> None:
    """Until metrics.jsonl holds a ``phase`` record at ``step`` or later (the readiness signal)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended early:\n{proc.communicate()[0]}"
        rows = read_metrics(run_dir, phase) if (run_dir / "metrics.jsonl").exists() else []
        if rows and rows[-1]["step"] >= step:
            return
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"no {phase} step {step} within {timeout} s")


def _steps(run_dir: Path, phase: str = "train") -> list[int]:
    return [int(r["step"]) for r in read_metrics(run_dir, phase)]


def _strays(run_dir: Path) -> list[Path]:
    return [*run_dir.glob(".tmp-*"), *run_dir.glob("checkpoints/.tmp-*"), *run_dir.glob("checkpoints/.LATEST-*")]


def test_overrides_given_at_resume_hold_for_the_next_resume(tmp_path: Path) -> None:
    assert main([*RUN, f"log.run_dir={tmp_path}", "ppo.steps=2"]) == 0
    proc = subprocess.Popen(_cli("--resume", str(tmp_path), "ppo.steps=5"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    _wait_for(proc, tmp_path, "train", 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _steps(tmp_path)[-1] < 5
    assert main(["--resume", str(tmp_path)]) == 0  # no overrides: the saved ppo.steps=5 holds
    assert _steps(tmp_path) == [1, 2, 3, 4, 5]
    assert json.loads((latest_checkpoint(tmp_path) / "state.json").read_text())["step"] == 5  # type: ignore[operator]


def test_sigterm_checkpoints_at_the_next_step_and_says_how_to_resume(tmp_path: Path) -> None:
    proc = subprocess.Popen(_cli(*RUN, f"log.run_dir={tmp_path}", "ppo.steps=40", "log.checkpoint_every=0"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(proc, tmp_path, "train", 1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == PREEMPTED, out
    done = _steps(tmp_path)[-1]
    assert 1 <= done < 40
    assert f"stopped by SIGTERM after PPO step {done} of 40, checkpoint written" in out
    assert f"agentgym-train --resume {tmp_path}" in out and "Traceback" not in out
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and json.loads((ckpt / "state.json").read_text())["step"] == done
    assert main(["--resume", str(tmp_path), "ppo.steps=" + str(done + 1)]) == 0
    assert _steps(tmp_path) == list(range(1, done + 2))  # nothing redone, nothing skipped


def test_sigterm_inside_the_warm_start_checkpoints_it(tmp_path: Path) -> None:
    proc = subprocess.Popen(_cli(*RUN, f"log.run_dir={tmp_path}", *WARM, "sft.steps=200", "sft.oracle_steps=200",
                                 "sft.checkpoint_every=0"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(proc, tmp_path, "sft", 1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == PREEMPTED, out
    done = _steps(tmp_path, "sft")[-1]
    assert f"stopped by SIGTERM after warm-start step {done} of 200, checkpoint written" in out
    assert f"continue from warm-start step {done} with: agentgym-train --resume {tmp_path}" in out
    state = json.loads((tmp_path / "checkpoints" / "step-000000" / "state.json").read_text())
    assert state["sft_step"] == done and state["sft_done"] is False


def test_a_kill_during_the_warm_start_save_is_redone_on_resume(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", KILLED_IN_WARM_START_SAVE, *RUN, f"log.run_dir={tmp_path}", *WARM,
                        "ppo.steps=1"], capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    assert not (tmp_path / "warm_start").exists()  # only the stray: never a half warm start
    assert (tmp_path / ".tmp-warm_start" / "config.json").exists()
    assert main(["--resume", str(tmp_path)]) == 0
    assert model_dir_problem(tmp_path / "warm_start", extra=("sft_optimizer.pt",)) is None
    assert _strays(tmp_path) == []
    assert _steps(tmp_path, "sft") == [1, 2, 3, 4, 5, 6] and _steps(tmp_path) == [1]
    # the arms of a comparison start from it
    from agentgym.trainer.config import load_config
    from agentgym.trainer.learner import Learner

    Learner(load_config("cpu-quickstart", [f"sft.load={tmp_path / 'warm_start'}", "sft.steps=0",
                                           f"log.run_dir={tmp_path / 'arm'}"]))


def test_a_warm_start_cut_short_is_written_again_or_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, f"log.run_dir={tmp_path}", *WARM, "ppo.steps=0"]) == 0
    warm = tmp_path / "warm_start"
    weights = (warm / "model.safetensors").read_bytes()
    (warm / "config.json").write_bytes(b"")  # as a kill left it before the save was atomic
    (tmp_path / "checkpoints" / ".tmp-step-000009-1234").mkdir()  # and a stray of a killed checkpoint
    assert main(["--resume", str(tmp_path), "ppo.steps=1"]) == 0  # resumed from step 0: written again
    assert model_dir_problem(warm, extra=("sft_optimizer.pt",)) is None
    assert (warm / "model.safetensors").read_bytes() == weights
    assert _strays(tmp_path) == []
    capsys.readouterr()
    (warm / "model.safetensors").write_bytes(weights[:100])  # now past step 0: cannot be re-taken
    assert main(["--resume", str(tmp_path), "ppo.steps=2", "controls=[placebo]", "log.eval_every=1"]) == 1
    err = capsys.readouterr().err
    assert "the warm start is incomplete" in err and "controls=[]" in err and err.count("\n") == 1
    arm = [*RUN, "sft.steps=0", f"sft.load={warm}", f"log.run_dir={tmp_path / 'arm'}"]
    assert main(arm) == 2
    assert f"sft.load={warm}: not a complete warm start" in capsys.readouterr().err


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MiB (the tiny policy's KL reference fits, a checkpoint with its AdamW state
    does not); skipped where mounting is not permitted."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_one_line_and_leaves_no_partial_checkpoint(small_disk: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = small_disk / "run"
    assert main([*RUN, f"log.run_dir={run_dir}"]) == 1
    err = capsys.readouterr().err
    assert "could not write checkpoint" in err and "No space left on device" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _strays(run_dir) == [] and not list(run_dir.glob("checkpoints/step-*"))
    assert _steps(run_dir) == [1]  # the step was done; its checkpoint could not be written
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    assert main(["--resume", str(run_dir)]) == 0  # space again: the run completes
    assert _steps(run_dir) == [1, 2, 3] and _strays(run_dir) == []


def test_a_failed_write_raises_one_line_and_removes_its_folder(tmp_path: Path) -> None:
    from agentgym.trainer.model.files import save_model_atomic
    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    def no_space(tmp: Path) -> None:
        raise OSError(28, "No space left on device", str(tmp / "sft_optimizer.pt"))

    with pytest.raises(CheckpointError, match="could not write .*warm_start: .*No space left"):
        save_model_atomic(build_tiny_gptoss(264, num_hidden_layers=1), tmp_path / "warm_start", extra=no_space)
    assert sorted(os.listdir(tmp_path)) == []
