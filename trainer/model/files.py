"""Model folders on disk: write and read a policy's weights, config and tokenizer.

A model folder is what ``save_pretrained`` writes (``config.json`` + ``model.safetensors``,
loadable by :func:`~agentgym.trainer.model.gptoss.load_policy`, transformers and vLLM). Writes are
atomic: into a hidden ``.tmp-*`` folder beside the target, fsynced, renamed into place
(:func:`save_model_atomic`, :func:`write_text_atomic`); :func:`model_dir_problem` says why a
folder is not complete. A sharded (FSDP2) policy is streamed to rank 0 one gathered parameter at
a time (:func:`export_model`). Reading (:func:`load_weights`) accepts a model folder, a
checkpoint folder or a run folder (its latest checkpoint, :func:`latest_checkpoint`); the run's
own checkpoints (optimizer, RNG, data position) are :mod:`agentgym.trainer.checkpoint`.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from agentgym.errors import CheckpointError

from ..distributed import (
    GatheredWeights,
    all_gather_objects,
    barrier,
    full_state_dict,
    global_rank,
    is_sharded,
    load_full_state,
)
from .weights import write_safetensors

__all__ = ["SHARDED", "STRAY", "error_line", "export_model", "find_model_dir", "fsync_path", "fsync_tree",
           "latest_checkpoint", "load_state_checked", "load_weights", "model_dir_problem", "model_weights_file",
           "read_errors", "save_model", "save_model_atomic", "save_tokenizer", "write_config", "write_errors",
           "write_text_atomic"]

SHARDED = "sharded"  # DCP folder of a checkpoint written by a sharded (torchrun) run
STRAY = ".tmp-"  # prefix of the temporary folders a write renames into place


def write_errors() -> tuple[type[BaseException], ...]:
    """What a failed write of a model or checkpoint file raises (catch these, not Exception): OSError (ENOSPC, EACCES), RuntimeError (``torch.save``:
    "PytorchStreamWriter failed writing file"), safetensors' own error."""
    from safetensors import SafetensorError

    return (OSError, RuntimeError, SafetensorError)


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged model or checkpoint file raises: cut short (EOFError, safetensors' header error),
    garbled (pickle, JSON: ValueError), unreadable (OSError)."""
    return (*write_errors(), EOFError, pickle.UnpicklingError, ValueError)


def error_line(e: BaseException) -> str:
    """``e`` as one line of at most ~300 characters, for a CheckpointError's message."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."

def write_config(model: Any, folder: str | Path, *, dtype: torch.dtype | None = None) -> None:
    """``config.json`` (and ``generation_config.json``) of a transformers model to ``folder``,
    with its class as the architecture (FSDP2 renames it ``FSDP<name>``) and ``dtype``."""
    import copy

    config = copy.copy(model.config)
    config.architectures = [type(model).__name__.removeprefix("FSDP")]
    if dtype is not None:
        config.dtype = dtype
    config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)


def save_tokenizer(tokenizer: Any, folder: str | Path) -> bool:
    """The tokenizer's files to ``folder`` when it has any (Hugging Face and GPT-OSS's
    ``o200k_harmony``); agentgym's byte tokenizer has none (a folder without tokenizer files
    and with its vocabulary size resolves to it: :func:`~agentgym.trainer.model.gptoss.resolve_tokenizer`).
    Returns whether files were written."""
    if hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(folder))
        return True
    if hasattr(getattr(tokenizer, "hf", None), "save_pretrained"):
        tokenizer.hf.save_pretrained(str(folder))
        return True
    return False


def export_model(model: torch.nn.Module, path: str | Path, *, dtype: torch.dtype | None = torch.bfloat16,
                 tokenizer: Any = None) -> Path:
    """A Hugging Face model folder of a plain or sharded policy: ``model.safetensors`` (in
    ``dtype``), ``config.json``, ``generation_config.json`` and the tokenizer's files. Streamed
    one tensor at a time; under torchrun every rank calls it (each parameter is gathered
    collectively) and rank 0 writes. Returns ``path``."""

    path, main = Path(path), global_rank() == 0
    if main:
        path.mkdir(parents=True, exist_ok=True)
    tied = {"lm_head.weight"} if getattr(getattr(model, "config", None), "tie_word_embeddings", False) else set()
    source = GatheredWeights(model, dtype or torch.float32) if is_sharded(model) else model
    try:
        write_safetensors(source, path / "model.safetensors", dtype=dtype, skip=tied, writer=main)
        if main:
            write_config(model, path, dtype=dtype)
            if tokenizer is not None:
                save_tokenizer(tokenizer, path)
    finally:
        barrier()  # also when rank 0 failed to write: the others must not wait in another collective
    return path


def save_model(model: torch.nn.Module, path: str | Path, *, dtype: torch.dtype | None = None) -> None:
    """``save_pretrained`` (config.json + model.safetensors) without transformers' per-save
    "Writing model shards" progress bar, which would break the trainer's own live bar.

    A sharded model is streamed to rank 0, which alone writes (:func:`export_model`, in
    ``dtype`` or float32). ``dtype`` casts the saved floating-point tensors (and the config's dtype)."""
    from transformers.utils import logging as hf_logging

    if is_sharded(model):
        export_model(model, path, dtype=dtype or torch.float32)
        return
    sd = full_state_dict(model, dtype=dtype) if dtype is not None else None
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(path, safe_serialization=True, state_dict=sd)  # type: ignore[operator]
        if dtype is not None:
            cfg_file = Path(path) / "config.json"
            cfg = json.loads(cfg_file.read_text())
            cfg["dtype"] = str(dtype).removeprefix("torch.")
            cfg_file.write_text(json.dumps(cfg, indent=2))
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    barrier()


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (a folder's entries: what a rename changed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file and folder under ``path``, and ``path`` itself."""
    for p in path.rglob("*"):
        fsync_path(p)
    fsync_path(path)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically: a temporary file, fsynced, renamed over it."""
    path = Path(path)
    tmp = path.with_name(f"{STRAY}{path.name}-{os.getpid()}")
    try:
        tmp.write_text(text)
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"could not write {path}: {error_line(e)}; check free disk space and "
                              "permissions of the run directory") from None


def save_model_atomic(model: torch.nn.Module, final: str | Path, *, dtype: torch.dtype | None = None,
                      extra: Any = None) -> None:
    """:func:`save_model` into ``final`` atomically: into ``.tmp-NAME`` beside it, then ``extra(tmp)``
    (rank 0: more files, e.g. the warm start's AdamW moments), fsync, rename over ``final``. A
    failure (a full disk) removes the temporary folder and raises one CheckpointError line; a
    kill leaves only the stray, which the next start removes. Every rank calls it."""

    final, main = Path(final), global_rank() == 0
    tmp = final.with_name(f"{STRAY}{final.name}")
    error = None
    try:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        save_model(model, tmp, dtype=dtype)  # collective for a sharded model (rank 0 writes)
        if main:
            if extra is not None:
                extra(tmp)
            fsync_tree(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_path(final.parent)
    except write_errors() as e:
        error = error_line(e)
    errors = [e for e in all_gather_objects(error) if e]
    if errors:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write {final}: {errors[0]}; check free disk space and "
                              "permissions of the run directory, then --resume")


def model_dir_problem(path: str | Path, *, extra: tuple[str, ...] = ()) -> str | None:
    """Why the model folder ``path`` (``config.json`` + ``model.safetensors`` [+ ``extra``]) is
    not complete, or None: a missing or empty file, a config that is not a JSON object, a
    safetensors file whose header cannot be read (cut short)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_dir():
        return f"{path} is missing"
    for name in ("config.json", "model.safetensors", *extra):
        f = path / name
        if not f.is_file() or f.stat().st_size == 0:
            return f"{f} is {'empty' if f.is_file() else 'missing'}"
    try:
        if not isinstance(json.loads((path / "config.json").read_text()), dict):
            return f"{path / 'config.json'} is not a JSON object"
        with safe_open(str(path / "model.safetensors"), framework="pt") as st:
            keys = list(st.keys())
        if not keys:
            return f"{path / 'model.safetensors'} holds no tensors"
    except read_errors() as e:
        return f"{path} cannot be read ({error_line(e)})"
    return None


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


def find_model_dir(path: str | Path, marker: str) -> Path | None:
    """The model directory under ``path`` that holds ``marker`` (``config.json``,
    ``model.safetensors``): ``path`` itself (a model dir, as ``save_pretrained`` writes), a run
    dir's latest checkpoint (``checkpoints/step-N/model``), or ``path/model`` (a checkpoint dir);
    None if none does."""
    p = Path(path)
    ckpt = latest_checkpoint(p)
    for cand in [p] + ([ckpt / "model"] if ckpt else []) + [p / "model"]:
        if (cand / marker).exists():
            return cand
    return None


def model_weights_file(path: str | Path) -> Path:
    """The ``model.safetensors`` of a run dir (its latest checkpoint), a checkpoint dir or a
    model dir written by agentgym-train / ``save_pretrained`` (:func:`find_model_dir`)."""
    found = find_model_dir(path, "model.safetensors")
    if found is not None:
        return found / "model.safetensors"
    ckpt = latest_checkpoint(path)
    hint = (" (a sharded torchrun checkpoint: resume it with --resume, or export its weights first)"
            if ckpt is not None and (ckpt / SHARDED).exists() else "")
    raise CheckpointError(f"no model.safetensors under {str(path)!r}; expected a run dir, a checkpoint "
                          f"dir or a model dir written by agentgym-train{hint}")


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load the weights found under ``path`` (see :func:`model_weights_file`) into ``model``,
    strictly: every parameter must be there with its shape, and nothing else. A sharded
    model reads them on rank 0 and receives its shards by broadcast."""
    from safetensors.torch import load_file

    if not is_sharded(model):
        load_state_checked(model, load_file(str(model_weights_file(path))), str(path))
        return
    sd: dict[str, torch.Tensor] = {}
    error = None
    if global_rank() == 0:
        try:
            sd = load_file(str(model_weights_file(path)))
            _check_keys(model, sd, str(path))
        except CheckpointError as e:
            error = str(e)
    errors = [e for e in all_gather_objects(error) if e]
    if errors:  # every rank raises the same error, none waits in a broadcast
        raise CheckpointError(errors[0])
    if not getattr(model.config, "tie_word_embeddings", False):
        load_full_state(model, sd)
    else:
        load_full_state(model, sd, strict=False)


def _check_keys(model: torch.nn.Module, sd: dict[str, torch.Tensor], where: str) -> None:
    expected = dict(model.state_dict())
    tied = {"lm_head.weight"} if getattr(getattr(model, "config", None), "tie_word_embeddings", False) else set()
    missing = sorted(set(expected) - set(sd) - tied)
    unexpected = sorted(set(sd) - set(expected))
    wrong = sorted(k for k in set(sd) & set(expected) if tuple(sd[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or wrong:
        def show(keys: list[str]) -> str:
            return ", ".join(keys[:8]) + (f" (+{len(keys) - 8} more)" if len(keys) > 8 else "")

        parts = [f"missing {len(missing)}: {show(missing)}" if missing else "",
                 f"unexpected {len(unexpected)}: {show(unexpected)}" if unexpected else "",
                 "wrong shape: " + ", ".join(f"{k} {tuple(sd[k].shape)} vs {tuple(expected[k].shape)}"
                                             for k in wrong[:4]) if wrong else ""]
        raise CheckpointError(f"{where}: the weights do not fit the model ("
                              + "; ".join(p for p in parts if p)
                              + "). Expected a checkpoint of the same architecture (model.name / "
                              "model.tiny settings of the run that wrote it)")


def load_state_checked(model: torch.nn.Module, sd: dict[str, torch.Tensor], where: str) -> None:
    """Load a full, unsharded state dict ``sd`` read from ``where`` into ``model``, after checking
    that its keys and shapes are the model's (tied weights aside): a CheckpointError naming the
    missing, unexpected and mis-shaped keys otherwise."""
    _check_keys(model, sd, where)
    model.load_state_dict(sd, strict=False)  # tied weights aside, _check_keys made it exact


