"""GPT-OSS policies: tiny ones built offline for tests, real ones loaded from disk or the hub.

Two things decide whether the trainer computes the *same* log-probs as the engine that
sampled, and both are pinned here:

* **Attention sinks.** GPT-OSS adds a learned per-head logit ``s_h`` to every softmax
  denominator, so attention rows sum to less than 1. In transformers 5.23 the ``eager``
  path honours it (``eager_attention_forward`` concatenates ``module.sinks``); ``sdpa``
  receives ``s_aux`` in ``**kwargs`` and ignores it; ``flash_attention_2`` only forwards it
  to kernels that support ``s_aux``/``learnable_sink`` (FA2 does not: it is dropped
  silently); ``flex_attention`` renormalises with the LSE on GPU but raises on CPU.
  :data:`SINK_AWARE_ATTENTION` lists what may be used; everything else is refused with a
  :class:`~agentgym.errors.ConfigError` by :func:`check_attention`.
* **The MoE expert path.** ``GptOssExperts`` dispatches on ``config._experts_implementation``:
  ``eager`` loops over the experts actually hit, ``grouped_mm`` sorts tokens by expert and
  runs one grouped GEMM (memory-efficient too), while ``batched_mm`` gathers one weight
  matrix *per token and chosen expert* (``gate_up_proj[expert_ids]``: S x H x 2I floats),
  the same blow-up as the old transformers eval path that repeated the hidden states for
  every expert. :func:`use_memory_efficient_experts` forces a safe path: on CUDA
  ``agentgym_grouped_mm`` (:func:`autocast_grouped_mm`), transformers' grouped GEMM in the
  autocast dtype: ``grouped_mm`` is not covered by autocast, and transformers casts its input to
  the float32 master weights, so under bf16 autocast the experts (most of GPT-OSS's FLOPs) ran
  in float32.
"""

from __future__ import annotations

import difflib
from typing import Any

import torch
from torch import nn

from agentgym.errors import ConfigError, TokenizerError

from .attention import set_attention
from .mxfp4 import forget_quantization, load_kwargs

__all__ = [
    "SINK_AWARE_ATTENTION",
    "SINK_DROPPING_ATTENTION",
    "ValueHead",
    "autocast_grouped_mm",
    "build_tiny_for",
    "build_tiny_gptoss",
    "check_attention",
    "is_tiny",
    "default_attention",
    "load_policy",
    "memory_efficient_experts",
    "register_experts",
    "resolve_attention",
    "resolve_tokenizer",
    "tiny_gptoss_config",
    "tokenizer_source",
    "use_memory_efficient_experts",
]

_INSTALL_HINT = "pip install 'agentgym-suite[train]'"

# Attention implementations that keep the sink logit in the softmax denominator.
SINK_AWARE_ATTENTION: dict[str, str] = {
    "eager": "transformers' eager attention (adds the sink column before the softmax); CPU or GPU",
    "agentgym_flex": "agentgym's flex-attention kernel with the exact LSE sink correction; GPU",
    "flex_attention": "transformers' flex attention (LSE renormalisation); GPU only, raises on CPU",
    "kernels-community/vllm-flash-attn3": "FlashAttention-3 with s_aux sinks (Hopper GPUs)",
}
# Implementations known to silently drop the sinks, with the reason shown to the user.
SINK_DROPPING_ATTENTION: dict[str, str] = {
    "sdpa": "torch SDPA has no sink term; transformers passes s_aux in **kwargs and it is ignored",
    "flash_attention_2": "FlashAttention-2 has no s_aux/learnable_sink argument, the sink is dropped",
    "paged|sdpa": "paged SDPA has no sink term",
    "paged|flash_attention_2": "FlashAttention-2 has no sink term",
}
# Expert implementations that never materialise per-token copies of expert weights.
EXPERTS_NAME = "agentgym_grouped_mm"
_SAFE_EXPERTS = ("eager", "grouped_mm", EXPERTS_NAME)
# flex attention's Triton kernel: "NYI: embedding dimension of the query, key, and value must be
# at least 16" (seen on an H100 with head_dim 8)
FLEX_MIN_HEAD_DIM = 16


def autocast_grouped_mm(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' grouped-GEMM experts, in the autocast dtype when autocast is on: the expert
    weights (float32 master copies) are cast for this call, as autocast casts a linear layer's,
    so that the GEMMs run in bf16 and gradients flow back to the float32 weights. Without
    autocast (float32, or FSDP2 mixed precision with bf16 parameters) it is transformers' own."""
    from transformers.integrations.moe import grouped_mm_experts_forward

    dev = hidden_states.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
    cast = {n: p.to(dtype) for n, p in self.named_parameters(recurse=False)
            if dtype is not None and p.is_floating_point() and p.dtype != dtype}
    if not cast:
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)  # type: ignore[no-any-return]
    # functional_call runs this function again with the cast weights: then nothing is left to cast
    return torch.func.functional_call(self, cast, (hidden_states.to(dtype), top_k_index, top_k_weights),  # type: ignore[no-any-return]
                                      strict=False)


def register_experts() -> str:
    """Register :func:`autocast_grouped_mm` with transformers' experts interface; returns its name."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(EXPERTS_NAME, autocast_grouped_mm)
    return EXPERTS_NAME


def memory_efficient_experts(device: str | torch.device) -> str:
    """The expert implementation for a device: the autocast-aware grouped GEMM on CUDA, the loop
    over hit experts elsewhere (bitwise reproducible on CPU)."""
    return register_experts() if torch.device(device).type == "cuda" else "eager"


def tiny_gptoss_config(vocab_size: int, /, **overrides: Any) -> Any:
    """A ~1M-parameter GPT-OSS config with the real model's shape of computation.

    MoE (4 experts, top-2, clamped SwiGLU), attention sinks, layers alternating sliding
    window / full attention, GQA (4 query heads, 2 KV heads), YaRN RoPE. ``overrides`` are
    passed to ``GptOssConfig`` (e.g. ``num_hidden_layers=2``).
    """
    try:
        from transformers import GptOssConfig
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError(f"transformers with GPT-OSS support is required: {_INSTALL_HINT}") from e
    _check_tiny_keys(GptOssConfig, overrides)
    n_layers = int(overrides.pop("num_hidden_layers", 4))
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=128,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=64,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)],
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        pad_token_id=vocab_size - 1,  # ByteTokenizer puts the pad id last (build_tiny_for: the tokenizer's)
        tie_word_embeddings=False,
        use_cache=True,
    )
    kwargs.update(overrides)
    return GptOssConfig(**kwargs)


def _check_tiny_keys(config_cls: Any, overrides: dict[str, Any]) -> None:
    """``model.tiny`` names ``GptOssConfig`` arguments only: transformers keeps any unknown keyword
    as an attribute nobody reads, so a typo (``hidden_sise``) would silently build the default."""
    import inspect

    known = {n for cls in config_cls.__mro__ if "__init__" in vars(cls)
             for n, p in inspect.signature(cls.__init__).parameters.items()
             if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    known.discard("vocab_size")  # the tokenizer decides it
    for key in overrides:
        if key not in known:
            hint = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            raise ConfigError(f"model.tiny: unknown key {key!r}; expected GptOssConfig arguments such as "
                              "hidden_size, num_hidden_layers, num_local_experts"
                              + (f"; did you mean 'model.tiny.{hint[0]}'?" if hint else ""))


def is_tiny(name: str) -> bool:
    """``tiny`` or ``tiny:TOKENIZER``: a tiny GPT-OSS built locally for that tokenizer."""
    return name == "tiny" or name.startswith("tiny:")


# The files a model folder holds when its tokenizer was saved with it (Hugging Face, o200k_harmony).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _refuse_a_misspelt_name(spec: str) -> None:
    """A ConfigError for ``spec`` close to a tokenizer name (``bytes``) that is no path either."""
    import os

    from agentgym.tokenizers import TOKENIZERS

    known = sorted(TOKENIZERS)
    close = difflib.get_close_matches(spec, [*known, "auto"], n=1)
    if spec not in TOKENIZERS and close and not os.path.exists(spec):
        raise ConfigError(f"unknown tokenizer {spec!r}; did you mean {close[0]!r}? Expected auto (the model's "
                          f"own), one of {known}, or a local folder / hub id of a Hugging Face tokenizer")


def tokenizer_source(model: str, spec: str = "auto") -> str | None:
    """The folder or hub id :func:`resolve_tokenizer` loads ``model``'s tokenizer from, or None
    when it is built in (a name of :data:`agentgym.tokenizers.TOKENIZERS`, a tiny model's); a
    misspelt name is a ConfigError, as there."""
    from agentgym.tokenizers import TOKENIZERS

    if spec != "auto":
        _refuse_a_misspelt_name(spec)
        return None if spec in TOKENIZERS else spec
    return None if is_tiny(model) else model


def resolve_tokenizer(model: str, spec: str = "auto", *, vocab_size: int | None = None) -> Any:
    """The tokenizer for ``model`` (``tiny``, ``tiny:NAME``, a model folder or a hub id): the one
    place ``model.tokenizer``, the doctor and ``agentgym-eval``'s ``tokenizer=`` are resolved.

    ``spec`` is ``byte`` (agentgym's byte tokenizer, 264 ids), another name of
    :data:`agentgym.tokenizers.TOKENIZERS` (``o200k_harmony`` / ``gpt-oss``: GPT-OSS's own,
    201,088 ids), a local folder or hub id of a Hugging Face tokenizer, or ``auto``: the model's
    own. ``auto`` gives ``tiny`` the byte tokenizer and ``tiny:NAME`` the tokenizer NAME; a model
    folder its tokenizer files, or, when it has none (agentgym saves no files for the byte
    tokenizer), the byte tokenizer if the model's vocabulary (``vocab_size``, else its
    ``config.json``) has the byte tokenizer's size; a hub id its own tokenizer. An unknown name is
    a ConfigError naming the known ones."""
    import json
    from pathlib import Path

    from agentgym.tokenizers import TOKENIZERS, ByteTokenizer, as_tokenizer

    known = sorted(TOKENIZERS)
    if spec == "auto" and is_tiny(model):
        name = model.split(":", 1)[1] if ":" in model else "byte"
        if name not in TOKENIZERS:
            raise ConfigError(f"unknown tiny model {model!r}: expected 'tiny' or 'tiny:NAME' with NAME one of "
                              f"{known} (e.g. tiny:o200k_harmony for GPT-OSS's real vocabulary)")
        return TOKENIZERS[name]()
    if spec == "auto":
        folder = Path(model)
        if folder.is_dir() and not any((folder / f).exists() for f in _TOKENIZER_FILES):
            byte = ByteTokenizer()
            if vocab_size is None and (folder / "config.json").is_file():
                vocab_size = json.loads((folder / "config.json").read_text()).get("vocab_size")
            if vocab_size == byte.vocab_size:
                return byte
            raise ConfigError(f"{model} has no tokenizer files and a vocabulary of {vocab_size} (agentgym's byte "
                              f"tokenizer has {byte.vocab_size}); name its tokenizer: one of {known}, or a path "
                              "/ hub id (model.tokenizer=..., or agentgym-eval's --policy-arg tokenizer=...)")
        return as_tokenizer(model)
    if spec in TOKENIZERS:
        return TOKENIZERS[spec]()
    _refuse_a_misspelt_name(spec)
    try:
        return as_tokenizer(spec)
    except TokenizerError as e:  # not a folder, not a hub id this machine can load, or no Harmony tokens
        raise ConfigError(f"tokenizer {spec!r} cannot be used: {e}. Expected auto (the model's own), one of "
                          f"{known}, or a local folder / hub id of a Hugging Face tokenizer") from None


def build_tiny_for(tokenizer: Any, seed: int = 0, **overrides: Any) -> nn.Module:
    """:func:`build_tiny_gptoss` sized for ``tokenizer``: its vocabulary and pad id."""
    overrides.setdefault("pad_token_id", int(getattr(tokenizer, "pad_id", tokenizer.vocab_size - 1)))
    return build_tiny_gptoss(tokenizer.vocab_size, seed=seed, **overrides)


def default_attention(device: str | torch.device = "cpu") -> str:
    """The sink-aware attention to use on a device: eager on CPU, agentgym's flex kernel on GPU."""
    return "agentgym_flex" if torch.device(device).type == "cuda" else "eager"


def resolve_attention(attn_implementation: str, device: str | torch.device, head_dim: int | None = None) -> str:
    """``auto`` -> the device's sink-aware default; any name is then checked (:func:`check_attention`)."""
    attn = default_attention(device) if attn_implementation == "auto" else attn_implementation
    check_attention(attn, device, head_dim=head_dim)
    return attn


def check_attention(attn_implementation: str, device: str | torch.device | None = None,
                    head_dim: int | None = None) -> None:
    """Raise :class:`ConfigError` if ``attn_implementation`` would drop the attention sinks
    (or, when ``device`` is given, cannot run there with gradients, e.g. flex on CUDA with a
    ``head_dim`` under 16)."""
    if attn_implementation in SINK_DROPPING_ATTENTION:
        raise ConfigError(
            f"attn_implementation={attn_implementation!r} drops GPT-OSS attention sinks "
            f"({SINK_DROPPING_ATTENTION[attn_implementation]}), so trainer log-probs would silently differ "
            f"from the engine's (measured |dlogp| 0.08-0.14 on GPT-OSS). Use one of "
            f"{sorted(SINK_AWARE_ATTENTION)} (\"auto\" picks eager on CPU, agentgym_flex on GPU)."
        )
    if attn_implementation not in SINK_AWARE_ATTENTION:
        raise ConfigError(
            f"attn_implementation={attn_implementation!r} is not known to honour GPT-OSS attention "
            f"sinks; expected one of {sorted(SINK_AWARE_ATTENTION)} or \"auto\"."
        )
    if device is None:
        return
    dev = torch.device(device).type
    if dev != "cuda" and attn_implementation in ("agentgym_flex", "flex_attention",
                                                 "kernels-community/vllm-flash-attn3"):
        raise ConfigError(
            f"attn_implementation={attn_implementation!r} needs a CUDA device, got {dev!r}; "
            "use 'eager' (or 'auto') on CPU."
        )
    if dev == "cuda" and attn_implementation in ("agentgym_flex", "flex_attention") and head_dim is not None \
            and head_dim < FLEX_MIN_HEAD_DIM:
        raise ConfigError(
            f"attn_implementation={attn_implementation!r} on CUDA needs head_dim >= {FLEX_MIN_HEAD_DIM} (flex "
            f"attention's kernel refuses smaller ones), this model has head_dim={head_dim}; use 'eager' or a "
            f"model with head_dim >= {FLEX_MIN_HEAD_DIM} (e.g. model.tiny={{head_dim: 16}})."
        )


def use_memory_efficient_experts(model: nn.Module) -> nn.Module:
    """Make every MoE layer loop over (or group by) the experts actually hit.

    ``agentgym_grouped_mm`` on CUDA (one grouped GEMM, in the autocast dtype), ``eager`` elsewhere
    (a loop over hit experts, bitwise reproducible on CPU). Never ``batched_mm``, which gathers
    a weight copy per token.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_local_experts"):
        return model
    current = getattr(config, "_experts_implementation", None)
    params = list(model.parameters())
    on_cuda = bool(params) and params[0].device.type == "cuda"
    if current not in _SAFE_EXPERTS or (on_cuda and current != EXPERTS_NAME):
        config._experts_implementation = memory_efficient_experts("cuda" if on_cuda else "cpu")
    return model


def build_tiny_gptoss(vocab_size: int, /, seed: int = 0, **overrides: Any) -> nn.Module:
    """A freshly initialised tiny GPT-OSS causal LM (offline, deterministic given ``seed``).

    Uses eager (sink-aware) attention and the per-hit-expert MoE loop. ``overrides`` go to
    :func:`tiny_gptoss_config`; ``attn_implementation=`` may be passed too.
    """
    from transformers import GptOssForCausalLM

    attn = overrides.pop("attn_implementation", "eager")
    check_attention(attn)
    config = tiny_gptoss_config(vocab_size, **overrides)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = GptOssForCausalLM(config)
    set_attention(model, attn)
    config._experts_implementation = "eager"
    model.generation_config.pad_token_id = config.pad_token_id
    model.float()
    return model


def load_policy(
    path: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    attn_implementation: str = "auto",
) -> nn.Module:
    """Load a causal LM from a local directory or a hub id, with sink-aware attention.

    ``attn_implementation="auto"`` picks eager on CPU and ``agentgym_flex`` on CUDA; anything
    that would drop GPT-OSS sinks raises :class:`ConfigError`. ``path="tiny"`` or
    ``"tiny:TOKENIZER"`` (``tiny:o200k_harmony``: GPT-OSS's real 201,088-id vocabulary) builds
    :func:`build_tiny_gptoss` for that tokenizer (:func:`resolve_tokenizer`).
    """
    from agentgym.hub import pretrained_kwargs

    # fails fast offline / for a missing folder, before transformers' slow import
    hub_kwargs = {} if is_tiny(path) else pretrained_kwargs(path, "model")
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as e:  # pragma: no cover
        raise ConfigError(f"transformers is required to load a policy: {_INSTALL_HINT}") from e
    attn = default_attention(device) if attn_implementation == "auto" else attn_implementation
    if is_tiny(path):
        model = build_tiny_for(resolve_tokenizer(path))
        check_attention(attn, device, head_dim=getattr(model.config, "head_dim", None))
        set_attention(model, attn)
        model.to(device=device, dtype=dtype or torch.float32)
        return model
    try:
        config = AutoConfig.from_pretrained(path, **hub_kwargs)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"could not load a model config from {path!r}: {e}. Expected a local directory with "
            "config.json (e.g. a checkpoint written by agentgym-train) or a hub id."
        ) from e
    is_gptoss = getattr(config, "model_type", "") == "gpt_oss"
    if is_gptoss:
        check_attention(attn, device, head_dim=getattr(config, "head_dim", None))
    load_attn = "eager" if attn == "agentgym_flex" else attn

    want = dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    model = forget_quantization(AutoModelForCausalLM.from_pretrained(
        path, dtype=want, attn_implementation=load_attn, **load_kwargs(config), **hub_kwargs,
    ))
    if attn == "agentgym_flex":
        set_attention(model, attn)
    # every parameter in the dtype asked for: transformers 5.19 leaves MXFP4-dequantized experts
    # in bf16 whatever ``dtype`` says, and they would be trained (and summed) in bf16
    model.to(device=device, dtype=want)  # type: ignore[arg-type]
    use_memory_efficient_experts(model)
    return model


class ValueHead(nn.Module):
    """Critic: one linear layer on the final hidden state -> values (B, T), float32."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)  # start at V=0 so early advantages are the returns
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.proj(hidden.float()).squeeze(-1)

