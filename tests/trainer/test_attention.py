"""Sink-aware attention: the LSE sink correction against transformers' eager GPT-OSS attention."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from agentgym.trainer.model.attention import (
    apply_sinks,
    dense_sink_attention,
    flex_sink_attention,
    set_attention,
)
from agentgym.trainer.model.gptoss import build_tiny_gptoss

B, HQ, HKV, T, D, WINDOW = 2, 4, 2, 24, 16, 6  # flex's CUDA kernel needs D >= 16 (D=8 failed on an H100)


class _Heads(nn.Module):
    """The two attributes eager_attention_forward reads from a GptOssAttention."""

    def __init__(self, sinks: torch.Tensor) -> None:
        super().__init__()
        self.sinks = nn.Parameter(sinks)
        self.num_key_value_groups = HQ // HKV


def _allowed(window: int | None, pad_row1: int = 5) -> torch.Tensor:
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    ok = j <= i
    if window is not None:
        ok = ok & (i - j < window)
    allowed = ok[None, None].expand(B, 1, T, T).clone()
    allowed[1, :, :, :pad_row1] = False  # left padding in row 1: rows 0..4 see nothing
    return allowed


def _inputs(seed: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, T, D, generator=g)
    k = torch.randn(B, HKV, T, D, generator=g)
    v = torch.randn(B, HKV, T, D, generator=g)
    s = torch.randn(HQ, generator=g)
    return [x.to(device=device, dtype=dtype).requires_grad_() for x in (q, k, v, s)]


@pytest.mark.parametrize("window", [None, WINDOW])
def test_dense_sink_attention_matches_eager_with_gradients(window: int | None) -> None:
    allowed = _allowed(window)
    q, k, v, s = _inputs(0)
    heads = _Heads(s.detach().clone())
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    ref, _ = eager_attention_forward(heads, q, k, v, additive, scaling=D**-0.5)  # (B, T, H, D)
    out = dense_sink_attention(q, k, v, s, allowed, scale=D**-0.5).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(ref)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v, s))
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref2, _ = eager_attention_forward(heads, q2, k2, v2, additive, scaling=D**-0.5)
    ref_grads = torch.autograd.grad((ref2 * g).sum(), (q2, k2, v2, heads.sinks))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_sink_gradient_formula() -> None:
    """dL/ds_h = -sum_i P_ih D_i, D_i = rowsum(dO_i * O_i), P_ih = exp(s_h - LSE'_i)."""
    q, k, v, s = _inputs(1)
    allowed = _allowed(None, pad_row1=0)
    out = dense_sink_attention(q, k, v, s, allowed, scale=D**-0.5)  # (B, H, T, D)
    dout = torch.randn_like(out)
    (ds,) = torch.autograd.grad((out * dout).sum(), (s,), retain_graph=True)
    with torch.no_grad():
        kk = k.repeat_interleave(HQ // HKV, 1)
        scores = (q @ kk.transpose(-1, -2)) * D**-0.5
        scores = scores.masked_fill(~allowed, float("-inf"))
        lse_sink = torch.logsumexp(torch.cat([scores, s.view(1, -1, 1, 1).expand(B, HQ, T, 1)], -1), -1)
        p_sink = torch.exp(s.view(1, -1, 1) - lse_sink)  # (B, H, T)
        d_row = (dout * out).sum(-1)
        expected = -(p_sink * d_row).sum(dim=(0, 2))
    torch.testing.assert_close(ds, expected, rtol=1e-5, atol=1e-6)


def test_apply_sinks_without_sink_is_identity() -> None:
    out = torch.randn(1, 2, 3, 4)
    lse = torch.randn(1, 2, 3)
    assert torch.equal(apply_sinks(out, lse, torch.full((2,), float("-inf"))), out)


def test_flex_forward_matches_eager_on_cpu() -> None:
    """Whole tiny model: agentgym_flex (flex forward, no grad on CPU) vs eager, with padding
    and sequences longer than the sliding window."""
    model = build_tiny_gptoss(264, seed=1)
    ids = torch.randint(0, 263, (2, 90), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    attn[1, :17] = 0
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model(input_ids=ids, attention_mask=attn).logits
        set_attention(model, "agentgym_flex")
        out = model(input_ids=ids, attention_mask=attn).logits
    torch.testing.assert_close(out[0], ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1, 17:], ref[1, 17:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, WINDOW])
@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize(("q_offset", "kv_offset"), [(0, 0), (10, 0), (10, 4)])
def test_sink_block_mask_is_transformers_mask_from_one_mask_function(
    window: int | None, padding: str, q_offset: int, kv_offset: int
) -> None:
    """The token mask of transformers' flex builder (its composition of mask functions, rebuilt
    here), from one mask function's code for every layer type, padding and offset, so compiled
    flex does not recompile per variant."""
    from torch.nn.attention.flex_attention import create_mask
    from transformers.masking_utils import (
        add_offsets_to_mask_function,
        and_masks,
        causal_mask_function,
        padding_mask_function,
        prepare_padding_mask,
        sliding_window_causal_mask_function,
    )

    from agentgym.trainer.model.attention import sink_mask_mod

    b, kv = 3, 40 - kv_offset
    q = kv + kv_offset - q_offset
    mask_function = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    attention = {"none": None, "left": torch.arange(40)[None].expand(b, -1) >= torch.tensor([[0], [5], [9]]),
                 "right": torch.arange(40)[None].expand(b, -1) < torch.tensor([[40], [31], [22]])}[padding]
    ours = sink_mask_mod(b, q_offset, kv, kv_offset, mask_function, attention, "cpu", window)
    ref = mask_function
    if attention is not None:
        ref = and_masks(ref, padding_mask_function(prepare_padding_mask(attention, kv, kv_offset)))
    ref = add_offsets_to_mask_function(ref, q_offset, kv_offset)
    assert torch.equal(create_mask(ours, b, 1, q, kv), create_mask(ref, b, 1, q, kv))
    other = sink_mask_mod(1, 0, 2, 0, causal_mask_function, None, "cpu", None)
    assert ours.__code__ is other.__code__
    captured = [c.cell_contents for c in ours.__closure__ or () if isinstance(c.cell_contents, torch.Tensor)]
    valid = next(t for t in captured if t.dim() == 2)  # compiled code guards on its layout
    assert valid.shape == (b, kv) and valid.is_contiguous() and valid.storage_offset() == 0


def test_sink_block_mask_hands_masks_it_does_not_know_to_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed sequences (an and_mask of causal and a packed-sequence mask) go to transformers'
    builder with the arguments as they came."""
    import transformers.masking_utils as mu

    from agentgym.trainer.model.attention import sink_block_mask, sink_mask_mod

    packed = torch.tensor([[0] * 7 + [1] * 9])
    mask_function = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(packed))
    assert sink_mask_mod(1, 0, 16, 0, mask_function, None, "cpu", None) is None
    calls = []
    monkeypatch.setattr(mu, "flex_attention_mask", lambda *a, **k: calls.append((a, k)) or "transformers' mask")
    assert sink_block_mask(1, 16, 16, 0, 0, mask_function, None, "cpu") == "transformers' mask"
    assert calls == [((1, 16, 16, 0, 0, mask_function, None, "cpu"), {"local_size": None})]


def test_kernel_without_mask_is_causal_with_window() -> None:
    """Called with attention_mask=None the kernel must not fall back to full attention."""
    from agentgym.trainer.model.attention import sink_attention_forward

    q, k, v, s = (x.detach() for x in _inputs(3))
    heads = _Heads(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, _ = sink_attention_forward(heads, q, k, v, None, scaling=D**-0.5, sliding_window=WINDOW)
    ref = dense_sink_attention(q, k, v, s, _allowed(WINDOW, pad_row1=0), scale=D**-0.5).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_flex_with_a_head_dim_under_16_on_cuda_is_a_clear_error() -> None:
    from agentgym.errors import ConfigError
    from agentgym.trainer.model.gptoss import check_attention, resolve_attention

    with pytest.raises(ConfigError, match="head_dim >= 16.*head_dim=8"):
        check_attention("agentgym_flex", "cuda", head_dim=8)
    with pytest.raises(ConfigError, match="head_dim >= 16"):
        resolve_attention("auto", "cuda", head_dim=8)  # auto is agentgym_flex on CUDA
    check_attention("agentgym_flex", "cuda", head_dim=16)
    check_attention("eager", "cuda", head_dim=8)


def test_tiny_uses_the_attention_the_config_asks_for(tmp_path: Path) -> None:
    """model.attn_implementation reaches the tiny model (it used to be built eager whatever was asked)."""
    from agentgym.errors import ConfigError
    from agentgym.trainer.config import load_config
    from agentgym.trainer.learner import Learner

    base = ["sft.steps=0", "log.tensorboard=false", f"log.run_dir={tmp_path}", "rollout.tasks_per_step=1",
            "rollout.samples_per_task=2", "log.eval_episodes=1", "model.tiny={num_hidden_layers: 2}"]
    s = Learner(load_config("cpu-quickstart", [*base, "model.attn_implementation=eager"]))
    assert s.model.config._attn_implementation == "eager"
    with pytest.raises(ConfigError, match="needs a CUDA device"):  # flex trains only on CUDA (no CPU backward)
        Learner(load_config("cpu-quickstart", [*base, "model.attn_implementation=agentgym_flex"]))


def test_sdpa_really_drops_the_sinks() -> None:
    """Why sdpa is refused: on GPT-OSS it silently gives different logits."""
    model = build_tiny_gptoss(264, seed=1)
    ids = torch.randint(0, 263, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        set_attention(model, "sdpa")
        out = model(input_ids=ids).logits
    assert (out - ref).abs().max() > 1e-2


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("window", [None, WINDOW])
def test_flex_sink_attention_forward_backward_on_gpu(window: int | None) -> None:
    from torch.nn.attention.flex_attention import create_block_mask

    allowed = _allowed(window).cuda()

    def mask_mod(b, h, qi, kj):  # type: ignore[no-untyped-def]
        return allowed[b, 0, qi, kj]

    bm = create_block_mask(mask_mod, B, None, T, T, device="cuda")
    q, k, v, s = _inputs(2, "cuda")
    out = flex_sink_attention(q, k, v, s, block_mask=bm, scale=D**-0.5)
    q2, k2, v2, s2 = (x.detach().clone().requires_grad_() for x in (q, k, v, s))
    ref = dense_sink_attention(q2, k2, v2, s2, allowed, scale=D**-0.5)
    valid = allowed.any(-1).expand(B, HQ, T)  # fully masked rows: both give 0, skip
    torch.testing.assert_close(out[valid], ref[valid], rtol=2e-5, atol=2e-5)
    g = torch.randn_like(out)
    ga = torch.autograd.grad((out * g).sum(), (q, k, v, s))
    gb = torch.autograd.grad((ref * g).sum(), (q2, k2, v2, s2))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@cuda
def test_tiny_model_flex_matches_eager_on_gpu_with_gradients() -> None:
    ids = torch.randint(0, 263, (2, 150), generator=torch.Generator().manual_seed(0)).cuda()
    grads = []
    logits = []
    for name in ("eager", "agentgym_flex"):
        model = build_tiny_gptoss(264, seed=2).cuda()
        set_attention(model, name)
        out = model(input_ids=ids).logits
        out.float().logsumexp(-1).sum().backward()
        logits.append(out.detach())
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)
    for n, ga in grads[0].items():
        torch.testing.assert_close(grads[1][n], ga, rtol=1e-3, atol=1e-4, msg=n)
    assert any("sinks" in n for n in grads[1])


@pytest.mark.gpu
@cuda
def test_training_on_gpu_compiles_flex_a_bounded_number_of_times() -> None:
    """Varying lengths, batch sizes and padding through both layer types, forward and backward,
    never reach dynamo's recompile limit (transformers' own flex masks did, within a few steps,
    and flex then fell back to its unfused kernel)."""
    import torch._dynamo

    from agentgym.trainer.model.logprobs import policy_forward

    flag = next(f for f in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit") if hasattr(torch._dynamo.config, f))
    torch._dynamo.reset()  # other tests' masks count towards the same limit
    model = build_tiny_gptoss(264, seed=2).cuda()
    set_attention(model, "agentgym_flex")
    with torch._dynamo.config.patch(**{flag: True}):
        for t, pad in [(30, 0), (50, 7), (130, 0), (300, 11), (600, 0), (257, 3), (1000, 20), (64, 5)]:
            ids = torch.randint(0, 263, (2 + pad % 2, t), device="cuda")
            attention = torch.ones_like(ids)
            attention[-1, t - pad :] = 0  # right padding, as the learner's batches have
            for prefix in (0, t // 3):  # the learner's shared-prefix path: sliding layers behind a KV cache
                ids[:, :prefix] = ids[:1, :prefix]
                lp = policy_forward(model, ids, attention, shared_prefix=prefix).logprobs
                lp.sum().backward()
