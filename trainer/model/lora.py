"""LoRA adapters on the policy, with PEFT (``model.lora.rank`` > 0).

    peft = add_adapters(model, cfg.model.lora)      # model now carries the adapters, base frozen
    ref = AdaptersOff(peft)                          # the KL reference: the same model, adapters off

:func:`add_adapters` injects PEFT's LoRA layers into the policy in place: the learner keeps
calling the same ``transformers`` model (its forward, its KV cache, routing replay, the hf
engine sharing it), and the adapters act in every forward. Targets: the attention projections
(``target_modules``) and, with ``experts``, GPT-OSS's fused expert weights
``mlp.experts.gate_up_proj`` (E, H, 2I) and ``mlp.experts.down_proj`` (E, I, H) through PEFT's
``target_parameters`` (one rank-r adapter per expert). Only the adapters require gradients, so
AdamW holds state for them alone.

The KL reference is the base: :class:`AdaptersOff` runs the same model under PEFT's
``disable_adapter()``, so no second copy of the weights is held or saved.

Checkpoints and exports hold the adapters only (:func:`save_adapters`: PEFT's
``adapter_model.safetensors`` + ``adapter_config.json``); :func:`export_merged` writes the base
with the adapters folded in, a plain model folder that ``transformers`` and ``agentgym-eval``
load.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from agentgym.errors import CheckpointError, ConfigError

from .files import save_model

__all__ = ["ADAPTER_FILE", "EXPERT_PARAMETERS", "MERGED", "AdapterSpec", "AdaptersOff", "adapter_state", "add_adapters",
           "export_merged", "is_adapted", "load_adapter_state", "save_adapters"]

ADAPTER_FILE = "adapter_model.safetensors"  # PEFT's name for the adapter weights
MERGED = "merged"  # CHECKPOINT/merged: the base with the adapters folded in (model.lora.export_merged)
EXPERT_PARAMETERS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]  # GPT-OSS's fused expert weights


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise ConfigError("model.lora.rank > 0 needs PEFT, which is not installed; fix: "
                          "pip install 'agentgym[train]' (or pip install 'peft>=0.17')") from None
    return peft


class AdapterSpec(Protocol):
    """What :func:`add_adapters` reads of its settings (the run's ``model.lora`` section is one)."""

    @property
    def rank(self) -> int: ...
    @property
    def alpha(self) -> float: ...
    @property
    def dropout(self) -> float: ...
    @property
    def targets(self) -> Sequence[str]: ...  # module names (by suffix) that get adapters
    @property
    def experts(self) -> bool: ...  # also the MoE expert parameters


def add_adapters(model: torch.nn.Module, cfg: AdapterSpec, *, seed: int = 0) -> Any:
    """Inject LoRA adapters into ``model`` in place and freeze everything else -> the PeftModel
    around it (for ``disable_adapter``, saving and merging). The adapters' initial weights are
    drawn from ``seed`` (B starts at zero, so the policy is unchanged until the first update)."""
    peft = _peft()
    lc = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                         target_modules=list(cfg.targets),
                         target_parameters=list(EXPERT_PARAMETERS) if cfg.experts else None,
                         bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            wrapped = peft.get_peft_model(model, lc)
        except ValueError as e:
            raise ConfigError(f"model.lora: {e}; expected module names of this model in model.lora.targets "
                              "(GPT-OSS: q_proj, k_proj, v_proj, o_proj)") from None
    return wrapped


def is_adapted(model: Any) -> bool:
    """Whether ``model`` is a PeftModel (what the checkpoints of a LoRA run save and load)."""
    return type(model).__module__.startswith("peft.")


class AdaptersOff:
    """The policy with its adapters disabled: the base model, used as the frozen KL reference.
    :meth:`active` is the context a forward pass runs in; :attr:`model` is the policy itself."""

    def __init__(self, peft_model: Any) -> None:
        self.peft_model = peft_model
        self.model: torch.nn.Module = peft_model.get_base_model()

    @contextlib.contextmanager
    def active(self) -> Iterator[torch.nn.Module]:
        with self.peft_model.disable_adapter():
            yield self.model


def adapter_state(peft_model: Any) -> dict[str, torch.Tensor]:
    """The adapters' weights by PEFT's names (what :func:`save_adapters` writes)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(peft_model).items()}


def save_adapters(peft_model: Any, path: str | Path) -> None:
    """PEFT's adapter folder: ``adapter_config.json`` + ``adapter_model.safetensors``."""
    peft_model.save_pretrained(str(path), safe_serialization=True, save_embedding_layers=False)


def load_adapter_state(peft_model: Any, path: str | Path) -> None:
    """Load the adapters saved under ``path`` (:func:`save_adapters`) into ``peft_model``, strictly:
    every adapter weight must be there with its shape."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = Path(path) / ADAPTER_FILE
    if not f.exists():
        raise CheckpointError(f"{path}: no {ADAPTER_FILE}; expected the adapter folder of a run with "
                              "model.lora.rank > 0 (resume with the run's own config)")
    saved = load_file(str(f))
    want = adapter_state(peft_model)
    bad = sorted(set(want) ^ set(saved)) or sorted(k for k in want if want[k].shape != saved[k].shape)
    if bad:
        raise CheckpointError(f"{path}: the adapters do not fit this model (first mismatch {bad[0]!r}); "
                              "resume with the run's own model.lora settings")
    set_peft_model_state_dict(peft_model, saved)


def export_merged(peft_model: Any, path: str | Path, *, dtype: torch.dtype | None = None) -> None:
    """Write the base with the adapters folded in (W + B A alpha/r) as a plain model folder;
    the policy in memory keeps its separate adapters (the merge runs on a copy)."""
    import copy

    merged = copy.deepcopy(peft_model).merge_and_unload()
    save_model(merged, path, dtype=dtype)
