"""No silent minutes: with stdout not a terminal, progress comes as plain lines at a steady cadence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest


def _timed_lines(cmd: list[str], every_s: float, timeout: float = 600, **kw: object) -> tuple[int, list[tuple[float, str]]]:
    """Run ``cmd`` with stdout on a pipe; every line with the second it arrived (from the start)."""
    env = {**os.environ, "AGENTGYM_PROGRESS_EVERY_S": str(every_s)}
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **kw)  # type: ignore[call-overload]
    lines = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
        assert time.monotonic() - t0 < timeout
    return p.wait(), lines


def test_a_long_step_still_gets_heartbeat_lines() -> None:
    script = textwrap.dedent("""
        import time
        from agentgym.trainer.metrics import Progress
        bar = Progress(4, "work")
        bar.update(1, "fast")
        time.sleep(2.0)            # one long step: nothing calls update meanwhile
        for i in (2, 3, 4):
            bar.update(i, f"loss {i}")
        bar.close()
    """)
    rc, lines = _timed_lines([sys.executable, "-c", script], every_s=0.4)
    assert rc == 0, lines
    texts = [t for _, t in lines]
    assert texts[0].startswith("work 0/4 (") and texts[-1].startswith("work 4/4 (") and texts[-1].endswith("loss 4")
    assert ", done" in texts[-1]
    during = [t for s, t in lines if t.startswith("work 1/4")]
    assert len(during) >= 3  # heartbeats while the long step ran
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    assert max(gaps) < 1.5, gaps


@pytest.mark.slow
def test_a_training_run_on_a_pipe_is_never_silent_for_long(tmp_path: Path) -> None:
    every = 2.0
    rc, lines = _timed_lines(
        [sys.executable, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", "threads=1", "log.plots=false",
         "log.tensorboard=false", f"log.run_dir={tmp_path}", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "sft.steps=6", "sft.batch_size=2",
         "ppo.steps=2", "log.eval_every=1", "log.eval_episodes=4", "log.eval_episodes_final=8",
         "log.eval_sampled=false", "controls=[]", "sft.min_wellformed=0"], every_s=every)
    assert rc == 0, lines
    text = "\n".join(t for _, t in lines)
    for phase in ("agentgym-train: starting", "warm start", "eval warm start", "ppo", "eval after PPO"):
        assert phase in text, (phase, text)
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    # one line at least every `every` s while a loop runs; a few more seconds between phases
    assert lines[0][0] < 60 and max(gaps) < every + 15, (max(gaps), lines)
