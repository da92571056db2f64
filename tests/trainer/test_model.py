"""Tiny GPT-OSS, sink-safe loading, and policy_forward's log-prob conventions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.tokenizers import ByteTokenizer
from agentgym.trainer.model.gptoss import (
    ValueHead,
    build_tiny_gptoss,
    check_attention,
    load_policy,
    tiny_gptoss_config,
)
from agentgym.trainer.model.logprobs import policy_forward

VOCAB = ByteTokenizer().vocab_size


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return build_tiny_gptoss(VOCAB, seed=0)


def test_tiny_config_has_gptoss_shape() -> None:
    c = tiny_gptoss_config(VOCAB)
    assert c.vocab_size == 264 and c.num_local_experts == 4 and c.num_experts_per_tok == 2
    assert c.layer_types == ["sliding_attention", "full_attention"] * 2
    assert c.num_attention_heads == 4 and c.num_key_value_heads == 2 and c.head_dim == 32
    assert tiny_gptoss_config(VOCAB, num_hidden_layers=6).layer_types[-1] == "full_attention"


def test_build_is_seeded_and_about_1m_params(tiny: torch.nn.Module) -> None:
    n = sum(p.numel() for p in tiny.parameters())
    assert 0.8e6 < n < 1.5e6
    again = build_tiny_gptoss(VOCAB, seed=0)
    other = build_tiny_gptoss(VOCAB, seed=1)
    sd, sd2, sd3 = tiny.state_dict(), again.state_dict(), other.state_dict()
    assert all(torch.equal(sd[k], sd2[k]) for k in sd)
    assert not torch.equal(sd["model.layers.0.self_attn.sinks"], sd3["model.layers.0.self_attn.sinks"])
    assert tiny.config._attn_implementation == "eager"
    assert tiny.config._experts_implementation == "eager"


@pytest.mark.parametrize("name", ["sdpa", "flash_attention_2", "something_else"])
def test_sink_dropping_attention_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="sink"):
        check_attention(name)
    with pytest.raises(ConfigError, match="sink"):
        load_policy("tiny", attn_implementation=name)


def test_gpu_kernels_refused_on_cpu() -> None:
    with pytest.raises(ConfigError, match="CUDA"):
        load_policy("tiny", attn_implementation="agentgym_flex")


def test_load_policy_roundtrip(tmp_path: Path, tiny: torch.nn.Module) -> None:
    tiny.save_pretrained(tmp_path)
    loaded = load_policy(str(tmp_path))
    assert loaded.config._attn_implementation == "eager"
    assert loaded.config._experts_implementation in ("eager", "grouped_mm")
    ids = torch.randint(0, 263, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, tiny(ids).logits, rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="sink"):
        load_policy(str(tmp_path), attn_implementation="sdpa")
    with pytest.raises(ConfigError, match="no such directory"):
        load_policy(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="config"):
        load_policy(str(tmp_path / "empty"))


def test_policy_forward_definition(tiny: torch.nn.Module) -> None:
    ids = torch.randint(0, 263, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = policy_forward(tiny, ids, temperature=0.7)
        logits = tiny(ids).logits.float() / 0.7
    logp_all = torch.log_softmax(logits[:, :-1], -1)
    expected = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert out.logprobs.dtype == torch.float32 and out.logprobs.shape == ids.shape
    assert torch.all(out.logprobs[:, 0] == 0)
    torch.testing.assert_close(out.logprobs[:, 1:], expected, rtol=0, atol=1e-5)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    torch.testing.assert_close(out.entropy[:, 1:], ent, rtol=0, atol=1e-5)
    assert out.values is None
    with pytest.raises(ConfigError, match="temperature"):
        policy_forward(tiny, ids, temperature=0.0)


def test_padding_left_or_right_does_not_change_logprobs(tiny: torch.nn.Module) -> None:
    seq = torch.randint(0, 263, (1, 25), generator=torch.Generator().manual_seed(2))
    pad = torch.full((1, 7), VOCAB - 1)
    with torch.no_grad():
        alone = policy_forward(tiny, seq).logprobs
        right = policy_forward(tiny, torch.cat([seq, pad], 1),
                               torch.cat([torch.ones(1, 25), torch.zeros(1, 7)], 1)).logprobs
        left = policy_forward(tiny, torch.cat([pad, seq], 1),
                              torch.cat([torch.zeros(1, 7), torch.ones(1, 25)], 1)).logprobs
    torch.testing.assert_close(right[:, :25], alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(left[:, 8:], alone[:, 1:], rtol=0, atol=1e-5)


def test_value_head_aligned_with_logprobs(tiny: torch.nn.Module) -> None:
    head = ValueHead(tiny.config.hidden_size)
    torch.nn.init.normal_(head.proj.weight)
    ids = torch.randint(0, 263, (2, 12), generator=torch.Generator().manual_seed(3))
    out = policy_forward(tiny, ids, value_head=head)
    assert out.values is not None and out.values.shape == ids.shape
    assert torch.all(out.values[:, 0] == 0)
    hidden = tiny.model(ids).last_hidden_state
    torch.testing.assert_close(out.values[:, 5], head(hidden)[:, 4])
    out.values.sum().backward()
    assert head.proj.weight.grad is not None


def test_memory_hungry_expert_path_is_replaced(tiny: torch.nn.Module) -> None:
    tiny.config._experts_implementation = "batched_mm"  # per-token weight gather
    ids = torch.randint(0, 263, (1, 8))
    with torch.no_grad():
        policy_forward(tiny, ids)
    assert tiny.config._experts_implementation == "eager"


def test_chunked_head_gives_same_logprobs_and_grads(tiny: torch.nn.Module) -> None:
    ids = torch.randint(0, 263, (2, 33), generator=torch.Generator().manual_seed(4))
    full = policy_forward(tiny, ids)
    full.logprobs.sum().backward()
    g_full = tiny.lm_head.weight.grad.clone()
    tiny.zero_grad()
    rows: list[int] = []
    hook = tiny.lm_head.register_forward_hook(lambda _m, inp, _o: rows.append(inp[0].shape[0]))
    try:
        chunked = policy_forward(tiny, ids, head_chunk_bytes=4 * VOCAB * 5, head="chunked")  # chunks of 5 rows
        chunked.logprobs.sum().backward()
    finally:
        hook.remove()
    assert max(rows) == 5  # the head never saw more than 5 rows of logits at once (fwd + recompute)
    torch.testing.assert_close(chunked.logprobs, full.logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(tiny.lm_head.weight.grad, g_full, rtol=1e-5, atol=1e-6)
    tiny.zero_grad()


@pytest.mark.parametrize("entropy", ["none", "value", "grad"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_head_matches_the_chunked_one_values_and_gradients(tiny: torch.nn.Module, entropy: str,
                                                                 dtype: torch.dtype) -> None:
    """The fused head (no (n, V) log-softmax, gather or their gradients) against the chunked one:
    log-probs, entropy and the gradients of every parameter, at a temperature, on the scored rows
    only, in chunks of 7 rows; float32 and bfloat16 autocast."""
    ids = torch.randint(0, 263, (3, 40), generator=torch.Generator().manual_seed(8))
    mask = (torch.rand(3, 40, generator=torch.Generator().manual_seed(9)) < 0.6).long()
    coef = torch.randn(3, 40, generator=torch.Generator().manual_seed(10))
    results = []
    for head in ("chunked", "fused"):
        tiny.zero_grad()
        rows: list[int] = []
        hook = tiny.lm_head.register_forward_hook(lambda _m, inp, _o, rows=rows: rows.append(inp[0].shape[0]))
        try:
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                out = policy_forward(tiny, ids, temperature=0.7, score_mask=mask, head=head,
                                     with_entropy=entropy != "none", entropy_grad=entropy == "grad",
                                     head_chunk_bytes=4 * VOCAB * 7)
            loss = (out.logprobs * coef).sum() + (0.3 * out.entropy.sum() if entropy == "grad" else 0)
            loss.backward()
        finally:
            hook.remove()
        if head == "chunked":
            assert max(rows) == 7  # checkpointed chunks (forward + recompute)
        results.append((out, {n: p.grad.clone() for n, p in tiny.named_parameters() if p.grad is not None}))
    (ref, g_ref), (got, g_got) = results
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=2e-2)
    torch.testing.assert_close(got.logprobs, ref.logprobs, **tol)
    torch.testing.assert_close(got.entropy, ref.entropy, **tol)
    assert got.entropy.requires_grad == (entropy == "grad")
    assert set(g_got) == set(g_ref)
    for name, g in g_ref.items():
        scale = float(g.abs().max()) + 1e-12
        err = float((g_got[name] - g).abs().max()) / scale
        assert err < (1e-5 if dtype == torch.float32 else 2e-2), (name, err)
    tiny.zero_grad()


def test_score_mask_computes_the_head_only_where_asked(tiny: torch.nn.Module) -> None:
    ids = torch.randint(0, 263, (3, 30), generator=torch.Generator().manual_seed(5))
    mask = torch.zeros_like(ids)
    mask[:, 10:16] = 1
    mask[1, 20:25] = 1
    full = policy_forward(tiny, ids)
    (full.logprobs * mask).sum().backward()
    g_full = [p.grad.clone() for p in tiny.parameters() if p.grad is not None]
    tiny.zero_grad()
    rows: list[int] = []
    hook = tiny.lm_head.register_forward_hook(lambda _m, inp, _o: rows.append(inp[0].shape[0]))
    try:
        part = policy_forward(tiny, ids, score_mask=mask)
    finally:
        hook.remove()
    assert rows == [int(mask.sum())]  # 23 rows through the head instead of 3 x 29
    torch.testing.assert_close(part.logprobs, full.logprobs * mask, rtol=0, atol=1e-6)
    torch.testing.assert_close(part.entropy, full.entropy * mask, rtol=0, atol=1e-6)
    part.logprobs.sum().backward()
    g_part = [p.grad.clone() for p in tiny.parameters() if p.grad is not None]
    tiny.zero_grad()
    for a, b in zip(g_full, g_part, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_entropy_has_no_gradient_unless_it_is_in_the_loss(tiny: torch.nn.Module) -> None:
    ids = torch.randint(0, 263, (2, 12), generator=torch.Generator().manual_seed(6))
    plain = policy_forward(tiny, ids)
    assert plain.logprobs.requires_grad and not plain.entropy.requires_grad
    with_grad = policy_forward(tiny, ids, entropy_grad=True)
    assert with_grad.entropy.requires_grad
    torch.testing.assert_close(plain.entropy, with_grad.entropy.detach(), rtol=0, atol=0)
    assert torch.all(policy_forward(tiny, ids, with_entropy=False).entropy == 0)


def test_mxfp4_format_round_trips_exactly() -> None:
    from agentgym.trainer.model.mxfp4 import FP4_VALUES, dequantize, quantize

    w = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    blocks, scales = quantize(w)
    assert blocks.shape == (3, 5, 2, 16) and scales.shape == (3, 5, 2) and blocks.dtype == torch.uint8
    back = dequantize(blocks, scales, dtype=torch.float32)
    assert float((back - w).norm() / w.norm()) < 0.2  # 4-bit values: ~10% error
    again = dequantize(*quantize(back), dtype=torch.float32)
    assert torch.equal(again, back)  # representable values are fixed points
    # every value is an FP4 value times its block's power of two
    unit = back.reshape(3, 5, 2, 32) / torch.exp2(scales.float() - 127).unsqueeze(-1)
    assert set(unit.flatten().tolist()) <= {abs(v) * s for v in FP4_VALUES for s in (1, -1)}


def test_mxfp4_checkpoint_loads_dequantized_for_training(tmp_path: Path) -> None:
    """A tiny GPT-OSS saved like openai/gpt-oss-20b (MXFP4 experts) loads as plain bf16-shaped
    experts holding exactly the dequantized values, and trains."""
    from safetensors.torch import load_file

    from agentgym.trainer.model.mxfp4 import dequantize, is_mxfp4, quantize, save_mxfp4

    model = build_tiny_gptoss(VOCAB, seed=3)
    save_mxfp4(model, tmp_path / "mx")
    assert is_mxfp4(tmp_path / "mx")
    stored = load_file(str(tmp_path / "mx" / "model.safetensors"))
    assert stored["model.layers.0.mlp.experts.gate_up_proj_blocks"].dtype == torch.uint8
    assert "model.layers.0.mlp.experts.gate_up_proj" not in stored
    loaded = load_policy(str(tmp_path / "mx"))
    # float32 master weights as asked (transformers 5.19 leaves dequantized experts in bf16)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    for i, layer in enumerate(loaded.model.layers):
        for name in ("gate_up_proj", "down_proj"):
            orig = getattr(model.model.layers[i].mlp.experts, name).detach()
            want = dequantize(*quantize(orig.transpose(-1, -2)), dtype=torch.float32).transpose(-1, -2)
            assert torch.equal(getattr(layer.mlp.experts, name).float(), want), (i, name)
    q = loaded.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(q, model.model.layers[0].self_attn.q_proj.weight.bfloat16().float())
    out = policy_forward(loaded, torch.randint(0, 263, (2, 16)))
    out.logprobs.sum().backward()
    assert loaded.model.layers[0].mlp.experts.gate_up_proj.grad is not None
    # saving it writes what is trained (bf16 experts), not a re-quantized copy
    from agentgym.trainer.model.files import save_model

    save_model(loaded, tmp_path / "again")
    assert not is_mxfp4(tmp_path / "again")
    assert "model.layers.0.mlp.experts.gate_up_proj" in load_file(str(tmp_path / "again" / "model.safetensors"))


def test_grouped_experts_run_in_the_autocast_dtype(tiny: torch.nn.Module) -> None:
    """transformers' grouped_mm experts cast their input to the (float32 master) weights, so under
    bf16 autocast they ran in float32; agentgym_grouped_mm runs them in bf16 and still trains the
    float32 weights."""
    import copy

    from torch.utils._python_dispatch import TorchDispatchMode

    from agentgym.trainer.model.gptoss import register_experts

    class GroupedDtypes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[torch.dtype] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if "grouped_mm" in str(func):
                self.seen.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    ids = torch.randint(0, 263, (2, 24), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        ref = policy_forward(tiny, ids).logprobs  # float32, eager expert loop
    seen = {}
    for name in ("grouped_mm", register_experts()):
        model = copy.deepcopy(tiny)
        model.config._experts_implementation = name
        mode = GroupedDtypes()
        with mode, torch.autocast("cpu", dtype=torch.bfloat16):
            out = policy_forward(model, ids)
        seen[name] = set(mode.seen)
        out.logprobs.sum().backward()
        experts = model.model.layers[0].mlp.experts
        assert experts.gate_up_proj.dtype == torch.float32 and experts.gate_up_proj.grad is not None
        assert float((out.logprobs.detach() - ref).abs().max()) < 0.1  # bf16 rounding, not another function
    assert seen == {"grouped_mm": {torch.float32}, "agentgym_grouped_mm": {torch.bfloat16}}
