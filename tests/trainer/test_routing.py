"""MoE routing capture, agreement and replay on a tiny GPT-OSS."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.logprobs import policy_forward
from agentgym.trainer.model import build_tiny_gptoss
from agentgym.trainer.routing import capture_routing, replay_routing, routing_agreement

IDS = torch.randint(0, 264, (2, 40), generator=torch.Generator().manual_seed(0))


def test_capture_gives_one_row_per_token_and_layer() -> None:
    model = build_tiny_gptoss(264, seed=0)
    with torch.no_grad(), capture_routing(model) as chosen:
        model(IDS)
    routes = torch.stack(chosen)
    assert routes.shape == (4, 80, 2) and int(routes.max()) < 4  # 4 layers, B*T tokens, top-2 of 4
    assert routing_agreement(routes, routes) == {"routing_agree": 1.0, "routing_tokens_all_layers_agree": 1.0}


def test_replay_imposes_the_other_models_experts() -> None:
    a = build_tiny_gptoss(264, seed=0)
    b = copy.deepcopy(a)
    with torch.no_grad():  # a different router: b routes differently on its own
        for layer in b.model.layers:
            layer.mlp.router.weight.add_(torch.randn_like(layer.mlp.router.weight))
    with torch.no_grad(), capture_routing(a) as ra, capture_routing(b) as rb:
        a(IDS)
        b(IDS)
    ra_t, rb_t = torch.stack(ra), torch.stack(rb)
    assert routing_agreement(ra_t, rb_t)["routing_agree"] < 0.9
    with torch.no_grad(), replay_routing(b, ra_t), capture_routing(b) as replayed:
        lp = policy_forward(b, IDS).logprobs
    assert routing_agreement(torch.stack(replayed), ra_t)["routing_agree"] == 1.0
    assert torch.isfinite(lp).all()
    # gradients still reach the router through the recomputed weights
    with replay_routing(b, ra_t):
        policy_forward(b, IDS).logprobs.sum().backward()
    assert b.model.layers[0].mlp.router.weight.grad is not None
    with pytest.raises(ConfigError, match="layers"):
        with replay_routing(b, ra_t[:2]):
            pass
