"""MXFP4 checkpoints (``openai/gpt-oss-20b`` ships its MoE experts so): read them dequantized.

MXFP4 (OCP microscaling): blocks of 32 values along the input dimension share one E8M0 scale
byte (``2 ** (byte - 127)``); each value is a 4-bit E2M1 float, one of
``±{0, 0.5, 1, 1.5, 2, 3, 4, 6}``, two per byte (low nibble first). GPT-OSS checkpoints store
``mlp.experts.{gate_up,down}_proj_blocks`` (uint8, ``(E, out, in/32, 16)``) and ``..._scales``
(uint8, ``(E, out, in/32)``) in place of the bf16 ``(E, in, out)`` expert weights, and say
``"quantization_config": {"quant_method": "mxfp4"}`` in ``config.json``.

Training needs the bf16 weights (MXFP4 has no gradients): :func:`load_kwargs` gives
``from_pretrained`` transformers' ``Mxfp4Config(dequantize=True)`` for such checkpoints
(``load_policy`` passes it, then :func:`forget_quantization`), which expands every value exactly (FP4 values times powers of two
are exact in bf16). :func:`quantize` / :func:`dequantize` are the format in plain torch, used to
build a tiny MXFP4 GPT-OSS locally (:func:`save_mxfp4`) and check that loading round-trips.

A rollout engine must not be started from the MXFP4 checkpoint when the trainer syncs weights
into it: its experts are then MXFP4 parameters (``*_blocks``/``*_scales``), the trainer's are
bf16 ``gate_up_proj``/``down_proj``, and a sync by name cannot update them. The trainer builds
vLLM from its own config and fills it with its bf16 weights in memory instead (see ``plan.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .files import save_model

__all__ = ["FP4_VALUES", "dequantize", "forget_quantization", "is_mxfp4", "load_kwargs", "quantize",
           "save_mxfp4"]

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
BLOCK = 32  # values per shared scale
EXPERT_WEIGHTS = ("gate_up_proj", "down_proj")  # GptOssExperts parameters stored as MXFP4


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., K) floats -> (blocks (..., K/32, 16) uint8, scales (..., K/32) uint8).

    Each block's scale is the smallest power of two that brings its largest magnitude within
    6 (the largest FP4 value); values round to the nearest FP4 value."""
    *lead, K = w.shape
    if K % BLOCK:
        raise ValueError(f"MXFP4 needs the last dimension to be a multiple of {BLOCK}, got {K}")
    x = w.float().reshape(*lead, K // BLOCK, BLOCK)
    amax = x.abs().amax(-1, keepdim=True).clamp(min=2.0**-126)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)  # (..., G, 1)
    scaled = x / torch.exp2(exp)
    mags = torch.tensor(FP4_VALUES[:8])
    idx = (scaled.abs().unsqueeze(-1) - mags).abs().argmin(-1)  # nearest magnitude, (..., G, 32)
    idx = idx + 8 * ((scaled < 0) & (idx > 0)).long()  # sign bit (no negative zero)
    nib = idx.to(torch.uint8)
    blocks = nib[..., 0::2] | (nib[..., 1::2] << 4)  # two values per byte, low nibble first
    scales = (exp.squeeze(-1) + 127).to(torch.uint8)
    return blocks, scales


def dequantize(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Inverse of :func:`quantize`: (..., G, 16) + (..., G) -> (..., G * 32) in ``dtype``."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    lo, hi = lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]
    vals = torch.stack([lo, hi], dim=-1).flatten(-2)  # (..., G, 32)
    vals = vals * torch.exp2(scales.float() - 127).unsqueeze(-1)
    return vals.flatten(-2).to(dtype)


def is_mxfp4(path: str | Path) -> bool:
    """Whether ``path`` (a model dir) holds an MXFP4-quantized checkpoint."""
    cfg = Path(path) / "config.json"
    if not cfg.exists():
        return False
    q = json.loads(cfg.read_text()).get("quantization_config") or {}
    return str(q.get("quant_method", "")).lower() == "mxfp4"


def load_kwargs(config: Any) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments that load an MXFP4 checkpoint dequantized (empty
    for anything else)."""
    q = getattr(config, "quantization_config", None)
    method = q.get("quant_method") if isinstance(q, dict) else getattr(q, "quant_method", None)
    if str(getattr(method, "value", method) or "").lower() != "mxfp4":
        return {}
    from transformers import Mxfp4Config  # type: ignore[attr-defined]

    return {"quantization_config": Mxfp4Config(dequantize=True)}


def forget_quantization(model: torch.nn.Module) -> torch.nn.Module:
    """After a dequantized load: drop transformers' record of the MXFP4 origin, which would
    otherwise re-quantize the experts on every ``save_pretrained`` (checkpoints, the KL
    reference and the engine's starting weights must hold the bf16 weights being trained)."""
    if getattr(model, "hf_quantizer", None) is not None:
        setattr(model, "hf_quantizer", None)  # noqa: B010
    if getattr(model, "_weight_conversions", None) is not None:
        # transformers 5 records the load-time conversions (blocks+scales -> weight) and reverts
        # them in save_pretrained; None makes it save like a model built from scratch
        setattr(model, "_weight_conversions", None)  # noqa: B010
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "quantization_config"):
        del config.quantization_config
    return model


def save_mxfp4(model: torch.nn.Module, path: str | Path) -> None:
    """Write ``model`` (a GPT-OSS) as an MXFP4 checkpoint laid out like ``openai/gpt-oss-20b``:
    expert weights as blocks + scales, everything else as is (bf16)."""
    from safetensors.torch import save_file

    path = Path(path)
    save_model(model, path, dtype=torch.bfloat16)
    sd: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if name.rsplit(".", 1)[-1] in EXPERT_WEIGHTS:
            # (E, in, out) -> stored transposed, blocks along `in`: (E, out, in/32, 16)
            blocks, scales = quantize(t.detach().transpose(-1, -2))
            sd[f"{name}_blocks"], sd[f"{name}_scales"] = blocks.contiguous(), scales.contiguous()
        else:
            sd[name] = t.detach().to(torch.bfloat16).contiguous()
    for f in path.glob("model*.safetensors*"):
        f.unlink()
    save_file(sd, str(path / "model.safetensors"), metadata={"format": "pt"})
    cfg_file = path / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }
    cfg_file.write_text(json.dumps(cfg, indent=2))
