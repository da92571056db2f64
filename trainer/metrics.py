"""Metrics sinks: JSON Lines (always), TensorBoard (when enabled), W&B (when installed and
enabled), and progress: a live rich bar on a terminal, plain lines every few seconds elsewhere.

``metrics.jsonl`` holds one object per record: ``{"phase": "sft"|"train"|"eval", "step": n,
...}``. On ``--resume`` the file is cut back to the records of steps the checkpoint covers,
so a resumed run's file reads exactly like an uninterrupted one. TensorBoard's event files are
rebuilt from that file when the logger opens (a resume, or a start over in the same run dir), so
its steps are those of ``metrics.jsonl``: increasing, each once, never the killed run's steps again
after the resumed run's.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from agentgym.errors import ConfigError
from agentgym.scores import solved

__all__ = ["MetricsLogger", "PROGRESS_EVERY_S", "Progress", "episode_stats", "episode_success",
           "progress_every_s", "read_metrics", "truncate_metrics"]


def _clean(v: Any) -> Any:
    # NaN/inf are not JSON: write them as strings so a bad step is visible, not silently lost.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class MetricsLogger:
    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, wandb: bool = False,
                 config: dict[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb: Any = None
        self._wandb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError("log.tensorboard=true needs tensorboard: pip install "
                                  "'agentgym-suite[train]' (or set log.tensorboard=false)") from e
            tb = self.run_dir / "tb"
            for old in tb.glob("events.out.tfevents.*"):  # the killed run's, past the checkpoint too
                old.unlink()
            self._tb = SummaryWriter(str(tb))
            for r in read_metrics(self.run_dir):  # what the checkpoint covers, as logged the first time
                self._scalars(r["phase"], r["step"], r)
        if wandb:
            try:
                import wandb as wb
            except ImportError as e:
                raise ConfigError("log.wandb=true needs wandb: pip install wandb "
                                  "(or set log.wandb=false)") from e
            self._wandb = wb.init(project="agentgym", dir=str(self.run_dir), config=config or {},
                                  name=self.run_dir.name)

    def log(self, phase: str, step: int, values: dict[str, Any]) -> None:
        record = {"phase": phase, "step": step, **{k: _clean(v) for k, v in values.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        scalars = self._scalars(phase, step, values)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def _scalars(self, phase: str, step: int, values: dict[str, Any]) -> dict[str, float]:
        scalars = {f"{phase}/{k}": float(v) for k, v in values.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("phase", "step")}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        return scalars

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: str | Path, phase: str | None = None) -> list[dict[str, Any]]:
    """The records of ``RUN_DIR/metrics.jsonl`` (of ``phase`` only, if given). Only whole lines
    count: a run that is writing, or was killed while writing, can leave a last line without its
    newline, and that record is not there yet."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    whole = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
    rows = [json.loads(line) for line in whole.splitlines() if line.strip()]
    return [r for r in rows if phase is None or r["phase"] == phase]


def truncate_metrics(run_dir: str | Path, keep_lines: int) -> None:
    """Keep the first ``keep_lines`` records (what the checkpoint had seen)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(lines[:keep_lines]))
    tmp.replace(path)


PROGRESS_EVERY_S = 30.0  # a plain progress line at least this often when stdout is not a terminal


def progress_every_s() -> float:
    """Seconds between plain progress lines (``AGENTGYM_PROGRESS_EVERY_S``, default 30)."""
    raw = os.environ.get("AGENTGYM_PROGRESS_EVERY_S", "")
    try:
        return max(0.05, float(raw)) if raw else PROGRESS_EVERY_S
    except ValueError:
        raise ConfigError(f"AGENTGYM_PROGRESS_EVERY_S must be a number of seconds, got {raw!r}") from None


class Progress:
    """Progress of a long loop, never silent for long; nothing at all when disabled.

    On a terminal: a live rich bar (its clock ticks every second). Elsewhere (output to a file,
    a pipe, CI): plain lines, ``DESCRIPTION n/total (elapsed) info``, one at the start, one at
    least every :func:`progress_every_s` seconds (a heartbeat thread writes one even while a
    single long step runs), and one at the end.
    """

    def __init__(self, total: int, description: str, enabled: bool = True, *, file: TextIO | None = None,
                 already: int = 0) -> None:
        self._bar: Any = None
        self._plain = False
        if not enabled:
            return
        self.file = file or sys.stdout
        self.total, self.description = total, description
        self._done, self._info = already, ""
        self._already = already  # done before this run (a resume): not counted in the rate
        self._t0 = self._last = time.monotonic()
        if not self.file.isatty():
            self._plain = True
            self._every = progress_every_s()
            self._lock = threading.Lock()
            self._stop = threading.Event()
            self._line()
            self._beat = threading.Thread(target=self._heartbeat, name="agentgym-progress", daemon=True)
            self._beat.start()
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                 TextColumn("{task.fields[info]}"), transient=False, console=Console(file=self.file))
        self._task = self._bar.add_task(description, total=total, completed=already, info="")
        self._bar.start()

    def _line(self, tail: str = "") -> None:
        elapsed = time.monotonic() - self._t0
        rate = (self._done - self._already) / elapsed if elapsed > 0 else 0.0
        left = f", ~{(self.total - self._done) / rate:.0f} s left" if 0 < rate and self._done < self.total else ""
        print(f"{self.description} {self._done}/{self.total} ({elapsed:.0f} s{left}){tail}"
              + (f" {self._info}" if self._info else ""), file=self.file, flush=True)
        self._last = time.monotonic()

    def _heartbeat(self) -> None:
        while not self._stop.wait(min(1.0, self._every)):
            with self._lock:
                if not self._stop.is_set() and time.monotonic() - self._last >= self._every:
                    self._line()

    def update(self, completed: int, info: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, info=info)
        elif self._plain:
            with self._lock:
                self._done, self._info = completed, info
                if time.monotonic() - self._last >= self._every:
                    self._line()

    def note(self, message: str) -> None:
        """A line that stays on screen (above the live bar, or plain when the bar is off)."""
        if self._bar is not None:
            self._bar.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=getattr(self, "file", sys.stdout), flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._plain:
            self._stop.set()
            with self._lock:
                self._line(", done" if self._done >= self.total else ", stopped")
            self._plain = False


def episode_success(traj: Any) -> bool:
    """The episode solved its task: the outcome of its last turn is 1 (:func:`agentgym.scores.solved`;
    a partial outcome is not a success)."""
    return bool(traj.turns) and solved(traj.turns[-1].components.get("outcome", 0.0))


def episode_stats(trajectories: list[Any]) -> dict[str, float]:
    """Per-batch episode numbers: reward, success (outcome 1: ``episode_success``), lengths, turns, errors."""
    n = max(len(trajectories), 1)
    rewards = [t.total_reward for t in trajectories]
    mean = sum(rewards) / n
    turns = [len(t.turns) for t in trajectories]
    return {
        "reward_mean": mean,
        "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / n),
        "success": sum(episode_success(t) for t in trajectories) / n,
        "turns_mean": sum(turns) / n,
        "tool_calls_mean": sum(1 for t in trajectories for u in t.turns if u.tool) / n,
        "errors_mean": sum(1 for t in trajectories for u in t.turns if u.error) / n,
        "policy_tokens_mean": sum(t.num_policy_tokens for t in trajectories) / n,
        "episode_tokens_mean": sum(len(t.tokens) for t in trajectories) / n,
        "truncated_frac": sum(t.truncated and not t.terminated for t in trajectories) / n,
    }
