"""Atomic checkpoints that let a killed run (even ``kill -9``) continue exactly.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-000010/``::

    model/              save_pretrained: config.json + model.safetensors (loadable by
                        load_policy, transformers and vLLM)
    value_head.safetensors   (GAE runs only)
    optimizer.pt  scheduler.pt   torch state dicts
    rng.pt              python, numpy and torch RNG states
    state.json          step, phase, data position, running reward stats, metrics line count

It is written to a hidden temporary directory, its files and folders fsynced, and renamed into
place (``os.replace`` is atomic on one filesystem; the parent folder is fsynced after it), then
``RUN_DIR/checkpoints/LATEST`` is replaced atomically. A crash mid-write leaves at most a stray
``.tmp-*`` directory, never a half checkpoint that ``--resume`` would pick up; the next start
removes strays (:func:`clean_stray`). A write that fails (a full disk: ``torch.save`` raises
``RuntimeError``, safetensors its own error) removes its temporary directory and raises one
:class:`~agentgym.errors.CheckpointError` line. The warm start (``RUN_DIR/warm_start``), the KL
reference and ``config.yaml`` are written the same way (:func:`save_model_atomic`,
:func:`write_text_atomic`), and a resumed run checks them (:func:`model_dir_problem`).

Under torchrun (a sharded policy) ``value_head`` and ``optimizer.pt`` are replaced by
``sharded/``: one torch.distributed.checkpoint (DCP) holding the policy, value head and AdamW
state by parameter name, each rank writing its shards. DCP reshards on load, so a run resumes
on a different number of processes (also a plain single process). ``model/`` is then the
*export*: a consolidated Hugging Face model in ``log.export_dtype`` (bfloat16 by default) with
its config and tokenizer, streamed by :func:`export_model` one gathered parameter at a time
(rank 0 writes; no rank holds the whole model), which ``transformers``, vLLM,
``agentgym-eval`` and ``model.init_from`` load like any other model folder.

The KL reference is saved once per run as ``RUN_DIR/reference/`` (``save_pretrained``
layout, in the compute dtype): the policy as PPO starts, after the warm start if any.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from agentgym.errors import CheckpointError

from .config import config_to_dict
from .distributed import all_gather_objects, barrier, global_rank, is_sharded
from .model.files import (
    SHARDED,
    STRAY,
    error_line,
    export_model,
    fsync_path,
    fsync_tree,
    latest_checkpoint,
    load_state_checked,
    read_errors,
    save_model,
    save_tokenizer,
    write_errors,
)
from .model.lora import MERGED, export_merged, is_adapted, load_adapter_state, save_adapters
from .sft import sft_optimizer

if TYPE_CHECKING:
    from .learner import Learner

__all__ = ["RESUME_IDENTITY", "check_resume_identity", "clean_stray", "resume_learner", "save_learner",
           "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]

# Config keys a resumed run may not change: they decide what the saved weights, optimizer state and
# trajectories mean (another model, tokenizer or env would load, or fail, as something else).
RESUME_IDENTITY = ("model.name", "model.tokenizer", "model.tiny", "model.init_from", "env.id", "env.prompt",
                   "ppo.advantage", "model.lora.rank", "model.lora.alpha", "model.lora.targets", "model.lora.experts")


def check_resume_identity(run_dir: str | Path, cfg: Any) -> None:
    """ConfigError when ``cfg`` changes a :data:`RESUME_IDENTITY` key of the run saved in
    ``run_dir/config.yaml`` (other keys, such as ``ppo.lr`` or ``ppo.steps``, may change)."""
    import yaml

    from agentgym.errors import ConfigError

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return
    saved, now = yaml.safe_load(path.read_text()) or {}, config_to_dict(cfg)
    defaults = config_to_dict(type(cfg)())  # a key a run's config.yaml predates had its default

    def get(d: dict[str, Any], key: str) -> Any:
        found: Any = d
        for k in key.split("."):
            if not isinstance(found, dict) or k not in found:
                return get(defaults, key) if d is not defaults else None
            found = found[k]
        return found

    changed = [(k, get(saved, k), get(now, k)) for k in RESUME_IDENTITY if get(saved, k) != get(now, k)]
    if changed:
        what = "; ".join(f"{k}={a!r}, not {b!r}" for k, a, b in changed)
        raise ConfigError(f"--resume {run_dir}: the run was made with {what}; its checkpoints belong to that "
                          "run. Drop those overrides to continue it, or start a new run (another log.run_dir; "
                          "model.init_from=RUN_DIR starts from its weights)")


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _learner(model: torch.nn.Module, value_head: torch.nn.Module | None) -> torch.nn.Module:
    """Policy and value head under one module, so a sharded state dict names both."""
    mods = {"policy": model}
    if value_head is not None:
        mods["value_head"] = value_head
    return torch.nn.ModuleDict(mods)


def save_checkpoint(run_dir: str | Path, step: int, *, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, scheduler: Any,
                    value_head: torch.nn.Module | None, state: dict[str, Any], keep: int = 2,
                    tokenizer: Any = None, export_dtype: torch.dtype = torch.bfloat16,
                    extra: Any = None) -> Path:
    """Write checkpoint ``step`` atomically; keep the newest ``keep`` (0 = all). Returns its path.
    With a sharded model every rank must call it (each writes its shards and takes part in the
    export in ``export_dtype``; rank 0 writes the rest). ``tokenizer``: its files go to ``model/``.
    A PeftModel (LoRA, ``trainer/model/lora.py``) saves its adapters only in ``model/``; ``extra(tmp)``
    writes more files into the checkpoint before it is renamed into place."""
    from safetensors.torch import save_file

    sharded, main = is_sharded(model), global_rank() == 0
    root = Path(run_dir) / "checkpoints"
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{'sharded' if sharded else os.getpid()}"
    error = None
    if main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    barrier()
    try:
        if sharded:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict

            msd, osd = get_state_dict(_learner(model, value_head), optimizer)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp / SHARDED))
            export_model(model, tmp / "model", dtype=export_dtype, tokenizer=tokenizer)
        elif main:
            tmp.mkdir()
            if is_adapted(model):
                save_adapters(model, tmp / "model")
            else:
                save_model(model, tmp / "model")
            if tokenizer is not None:
                save_tokenizer(tokenizer, tmp / "model")
            if value_head is not None:
                save_file({k: v.contiguous() for k, v in value_head.state_dict().items()},
                          str(tmp / "value_head.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            if extra is not None:
                extra(tmp)
        if main:
            torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
            torch.save(rng_state(), tmp / "rng.pt")
            (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
            fsync_tree(tmp)
    except write_errors() as e:
        error = error_line(e)
    errors = [e for e in all_gather_objects(error) if e]
    if not errors and main:
        try:
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            latest_tmp = root / f".LATEST-{os.getpid()}"
            latest_tmp.write_text(final.name)
            fsync_path(latest_tmp)
            os.replace(latest_tmp, root / "LATEST")
            fsync_path(root)
        except OSError as e:
            errors = [error_line(e)]
    errors = [e for e in all_gather_objects(errors[0] if errors else None) if e]
    if errors:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {final}: {errors[0]}; check free disk "
                              "space and permissions of the run directory")
    if keep > 0 and main:
        steps = sorted(p for p in root.glob("step-*") if p.is_dir())
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def clean_stray(run_dir: str | Path) -> list[Path]:
    """Remove what killed writes left in ``run_dir``: ``.tmp-*`` folders and files (checkpoints,
    the warm start, the reference, config.yaml) and ``checkpoints/.LATEST-*``. Rank 0, at start,
    before anything is written. Returns what was removed."""
    run_dir = Path(run_dir)
    found = [*run_dir.glob(f"{STRAY}*"), *(run_dir / "checkpoints").glob(f"{STRAY}*"),
             *(run_dir / "checkpoints").glob(".LATEST-*")]
    for p in found:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return found


def load_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, value_head: torch.nn.Module | None) -> dict[str, Any]:
    """Restore everything saved by :func:`save_checkpoint` in place; returns ``state.json``.

    A sharded checkpoint (``sharded/``) loads into a sharded or a plain model, on any number
    of processes; a single-process one only into a plain model."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
        if (path / SHARDED).exists():
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            learner = _learner(model, value_head)
            msd, osd = get_state_dict(learner, optimizer)
            try:
                dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(path / SHARDED))
            except (RuntimeError, ValueError, KeyError) as e:
                raise CheckpointError(f"{path}: the sharded checkpoint does not fit this model and "
                                      f"optimizer ({e}); resume with the run's own config") from e
            set_state_dict(learner, optimizer, model_state_dict=msd, optim_state_dict=osd)
        elif is_sharded(model):
            raise CheckpointError(f"{path} was written by a single process; torchrun runs resume "
                                  "from sharded checkpoints only. Start a new run from its weights "
                                  f"with model.init_from={path}")
        else:
            if is_adapted(model):
                load_adapter_state(model, path / "model")
            else:
                load_state_checked(model, load_file(str(path / "model" / "model.safetensors")), str(path))
            if value_head is not None:
                value_head.load_state_dict(load_file(str(path / "value_head.safetensors")))
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
        scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
        set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    except FileNotFoundError as e:
        raise CheckpointError(f"{path} is not a complete checkpoint ({e.filename} is missing); "
                              "pick another one under RUN_DIR/checkpoints") from e
    except read_errors() as e:
        raise CheckpointError(f"{path} cannot be read ({error_line(e)}): a damaged checkpoint; remove "
                              "it (LATEST then names none, the newest complete one is used) and --resume") from e
    return state


# ---------------------------------------------------------------------------- a run's learner

def save_learner(learner: Learner, step: int, state: dict[str, Any], *, optimizer: Any = None,
                 scheduler: Any = None) -> Path:
    """Checkpoint ``step`` of a run: the learner's weights (+ value head), its optimizer and
    schedule (or the warm start's own ``optimizer`` and ``scheduler``, mid warm start) and the
    driver's ``state``; a PPO checkpoint also exports the model with its tokenizer. With LoRA
    the checkpoint holds the adapters (and with ``model.lora.export_merged`` the merged model
    in ``merged/``)."""
    cfg = learner.cfg
    model = learner.model if learner.peft is None else learner.peft
    if optimizer is not None:
        return save_checkpoint(cfg.log.run_dir, step, model=model, optimizer=optimizer,
                               scheduler=scheduler, value_head=learner.value_head, state=state,
                               keep=cfg.log.keep_checkpoints)
    extra = None
    if learner.peft is not None and cfg.model.lora.export_merged:
        def extra(tmp: Path) -> None:
            export_merged(learner.peft, tmp / MERGED, dtype=getattr(torch, cfg.log.export_dtype))
            save_tokenizer(learner.tokenizer, tmp / MERGED)
    return save_checkpoint(cfg.log.run_dir, step, model=model, optimizer=learner.optimizer,
                           scheduler=learner.scheduler, value_head=learner.value_head, state=state,
                           keep=cfg.log.keep_checkpoints, tokenizer=learner.tokenizer,
                           export_dtype=getattr(torch, cfg.log.export_dtype), extra=extra)


def resume_learner(learner: Learner) -> tuple[dict[str, Any], tuple[int, Any, Any] | None]:
    """Load the run's latest checkpoint into ``learner`` -> (the driver's state, and for a run
    killed during its warm start ``(step, optimizer, scheduler)`` of that warm start)."""
    cfg = learner.cfg
    ckpt = latest_checkpoint(cfg.log.run_dir)
    if ckpt is None:
        raise CheckpointError(f"no checkpoint in {cfg.log.run_dir} to resume from; start the run without --resume")
    model = learner.model if learner.peft is None else learner.peft  # LoRA: the adapters only
    sft_resume = None
    if "sft_step" in json.loads((ckpt / "state.json").read_text()):  # its own optimizer and schedule come back

        opt, sched = sft_optimizer(cfg, learner.model)
        state = load_checkpoint(ckpt, model=model, optimizer=opt, scheduler=sched,
                                value_head=learner.value_head)
        sft_resume = (int(state["sft_step"]), opt, sched)
    else:
        state = load_checkpoint(ckpt, model=model, optimizer=learner.optimizer,
                                scheduler=learner.scheduler, value_head=learner.value_head)
    # The optimizer state brings back the saved lr and weight decay; the config decides
    # (a resume may change ppo.lr on purpose). Unchanged values give the same floats.
    lr, sched = cfg.ppo.lr, learner.scheduler
    sched.base_lrs = [lr] * len(learner.optimizer.param_groups)
    for g, factor in zip(learner.optimizer.param_groups, sched.lr_lambdas, strict=True):
        g["initial_lr"], g["weight_decay"] = lr, cfg.ppo.weight_decay
        g["lr"] = lr * factor(sched.last_epoch)
    return state, sft_resume
