"""Atomic checkpoints that let a killed run (even ``kill -9``) continue exactly.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-000010/``::

    model/              save_pretrained: config.json + model.safetensors (loadable by
                        load_policy, transformers and vLLM)
    value_head.safetensors   (GAE runs only)
    optimizer.pt  scheduler.pt   torch state dicts
    rng.pt              python, numpy and torch RNG states
    state.json          step, phase, data position, running reward stats, metrics line count

It is written to a hidden temporary directory and renamed into place (``os.replace`` is
atomic on one filesystem), then ``RUN_DIR/checkpoints/LATEST`` is replaced atomically. A
crash mid-write leaves at most a stray ``.tmp-*`` directory, never a half checkpoint that
``--resume`` would pick up.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.errors import CheckpointError

__all__ = ["latest_checkpoint", "load_checkpoint", "rng_state", "save_checkpoint", "save_model", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_model(model: torch.nn.Module, path: str | Path) -> None:
    """``save_pretrained`` (config.json + model.safetensors) without transformers' per-save
    "Writing model shards" progress bar, which would break the trainer's own live bar."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(path, safe_serialization=True)  # type: ignore[operator]
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def save_checkpoint(run_dir: str | Path, step: int, *, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, scheduler: Any,
                    value_head: torch.nn.Module | None, state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoint ``step`` atomically; keep the newest ``keep`` (0 = all). Returns its path."""
    from safetensors.torch import save_file

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_model(model, tmp / "model")
        if value_head is not None:
            save_file({k: v.contiguous() for k, v in value_head.state_dict().items()},
                      str(tmp / "value_head.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        latest_tmp = root / f".LATEST-{os.getpid()}"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, root / "LATEST")
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {final}: {e}; check free disk space "
                              "and permissions of the run directory") from e
    if keep > 0:
        steps = sorted(p for p in root.glob("step-*") if p.is_dir())
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint named by ``LATEST`` (or the newest complete one), None if there is none."""
    root = Path(run_dir) / "checkpoints"
    marker = root / "LATEST"
    if marker.exists():
        p = root / marker.read_text().strip()
        if (p / "state.json").exists():
            return p
    steps = sorted(p for p in root.glob("step-*") if (p / "state.json").exists())
    return steps[-1] if steps else None


def load_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, value_head: torch.nn.Module | None) -> dict[str, Any]:
    """Restore everything saved by :func:`save_checkpoint` in place; returns ``state.json``."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
        weights = load_file(str(path / "model" / "model.safetensors"))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
            raise CheckpointError(f"{path}: weights do not fit the model (missing {missing[:3]}, "
                                  f"unexpected {unexpected[:3]}); resume with the run's own config")
        if value_head is not None:
            value_head.load_state_dict(load_file(str(path / "value_head.safetensors")))
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
        scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
        set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    except FileNotFoundError as e:
        raise CheckpointError(f"{path} is not a complete checkpoint ({e.filename} is missing); "
                              "pick another one under RUN_DIR/checkpoints") from e
    return state
