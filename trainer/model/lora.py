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

An engine with its own weights (vLLM) samples the same policy from :class:`MergedWeights`: the
base with the adapters folded in, computed in memory at each weight sync, while the learner's
model keeps its separate adapters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from agentgym.errors import CheckpointError, ConfigError

from .files import save_model

__all__ = ["ADAPTER_FILE", "EXPERT_PARAMETERS", "MERGED", "AdapterSpec", "AdaptersOff", "MergedWeights", "adapter_state",
           "add_adapters", "export_merged", "is_adapted", "load_adapter_state", "save_adapters"]

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


class MergedWeights:
    """What an engine's weight sync reads from an adapted policy (``Engine.sync_weights``, like
    ``GatheredWeights``): ``state_dict()`` maps the base model's own names to the base weights with
    the adapters folded in, W + (alpha / r) B A for an adapted linear layer and the per-expert
    delta for an adapted expert parameter (PEFT's ``get_delta_weight``), computed one tensor at a
    time when read, in the weight's dtype and without autograd. The policy's own weights are never
    written (no merge in place); the adapters' weights themselves are left out. ``model``: the
    PeftModel or the transformers model the adapters were injected into; :attr:`model` is the
    latter (what ``vllm._write_config`` reads the config of)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model: torch.nn.Module = model.get_base_model() if is_adapted(model) else model  # type: ignore[operator]

    def state_dict(self) -> Mapping[str, torch.Tensor]:
        return _LazyMerged(self.model)


def _base_name(key: str) -> str:
    """PEFT's name of a wrapped weight -> the base model's (``q_proj.base_layer.weight`` ->
    ``q_proj.weight``; nested expert wrappers add one ``base_layer`` each)."""
    return ".".join(p for p in key.split(".") if p != "base_layer")


class _LazyMerged(Mapping[str, torch.Tensor]):
    def __init__(self, model: torch.nn.Module) -> None:
        from peft.tuners.lora import LoraLayer, ParamWrapper

        sd = model.state_dict()
        # base name -> PEFT's key; the adapters' own tensors (lora_A, lora_B, ...) are not the base's
        self._keys = {_base_name(k): k for k in sd if not any(p.startswith("lora_") for p in k.split("."))}
        self._sd = sd
        self._deltas: dict[str, list[Any]] = {}  # base name -> the LoRA layers adding to it
        for prefix, layer in model.named_modules():
            if not isinstance(layer, LoraLayer) or layer.disable_adapters or layer.merged:
                continue  # disabled: the base acts alone; merged: the base weight already holds the delta
            param = layer.parameter_name if isinstance(layer, ParamWrapper) else "weight"
            target = _base_name(f"{prefix}.{param}" if prefix else param)
            if target not in self._keys:
                raise ConfigError(f"LoRA layer {prefix!r} adapts {target!r}, which the model's state dict lacks; "
                                  "expected adapters on linear layers or on GPT-OSS's expert parameters")
            self._deltas.setdefault(target, []).append(layer)

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._sd[self._keys[key]].detach()
        layers = self._deltas.get(key)
        if not layers:
            return t
        with torch.no_grad():
            merged = t.clone()
            for layer in layers:
                for name in layer.active_adapters:
                    if name in layer.lora_A:
                        merged += layer.get_delta_weight(name).to(merged.dtype)
        return merged

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
