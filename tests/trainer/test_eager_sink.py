"""The trainer's eager sink attention (trainer/model/eager_sink.py) is transformers' eager, bit
for bit: the same log-probs and the same gradients, through the whole tiny GPT-OSS."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym.trainer.model.eager_sink import SINK_EAGER, trainer_attention
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import _predicting_hidden

V = 264


def _inputs(B: int, T: int, prefix: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids sharing ``prefix`` tokens, right-padded rows of different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V - 1, (B, T), generator=g)
    ids[:, :prefix] = ids[:1, :prefix]
    mask = torch.ones(B, T, dtype=torch.long)
    for b in range(1, B):
        mask[b, T - 7 * b:] = 0
        ids[b, T - 7 * b:] = V - 1
    return ids, mask


def _nll_and_grads(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, prefix: int,
                   fast: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    if fast:
        with trainer_attention(model):
            assert model.config._attn_implementation == SINK_EAGER
            h = _predicting_hidden(model, ids, mask, prefix)
    else:
        h = _predicting_hidden(model, ids, mask, prefix)
    logp = torch.log_softmax(model.lm_head(h).float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    loss = -(logp * mask[:, 1:]).sum() / mask.sum()
    loss.backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("prefix", [0, 70])  # whole rows; a shared prefix through the KV cache
def test_bit_identical_to_eager(prefix: int) -> None:
    model = build_tiny_gptoss(V, seed=3)
    model.train()
    with torch.no_grad():  # sinks away from their zero init, so that their gradient path is exercised
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 1.0)
    ids, mask = _inputs(4, 150, prefix, seed=5)
    ref_lp, ref_g = _nll_and_grads(model, ids, mask, prefix, fast=False)
    lp, g = _nll_and_grads(copy.deepcopy(model), ids, mask, prefix, fast=True)
    assert model.config._attn_implementation == "eager"  # switched back
    assert torch.equal(lp, ref_lp)
    assert ref_g.keys() == g.keys() and any("sinks" in n for n in g)
    for n in ref_g:
        assert torch.equal(g[n], ref_g[n]), f"{n}: max diff {(g[n] - ref_g[n]).abs().max()}"


def test_bfloat16_autocast_falls_back_to_eager() -> None:
    model = build_tiny_gptoss(V, seed=4)
    ids, mask = _inputs(2, 40, 0, seed=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = _predicting_hidden(model, ids, mask, 0).detach()
        with trainer_attention(model):
            out = _predicting_hidden(model, ids, mask, 0).detach()
    assert torch.equal(out, ref)


def test_other_attention_left_alone() -> None:
    model = build_tiny_gptoss(V, seed=4)
    model.config._attn_implementation = "sdpa"
    with trainer_attention(model):
        assert model.config._attn_implementation == "sdpa"
