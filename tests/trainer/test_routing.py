"""MoE routing capture, agreement and replay on a tiny GPT-OSS."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.model.routing import capture_routing, replay_routing, routing_agreement

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


def test_engine_routing_batch_layout_and_replay_of_a_batch() -> None:
    """The hf engine's routing (hooks on its model), laid out like a right-padded batch and
    replayed: the same as replaying the flat (L, B*T, k) routing."""
    from agentgym.trainer.algo.batch import Batch
    from agentgym.trainer.model.routing import batch_routes, engine_routing, replay_batch
    from agentgym.trainer.rollout.engines.hf import HFEngine

    model = build_tiny_gptoss(264, seed=0)
    seqs = [IDS[0, :40].tolist(), IDS[1, :25].tolist()]
    routes = engine_routing(HFEngine(model), seqs)
    assert [r.shape for r in routes] == [(4, 40, 2), (4, 25, 2)]
    with torch.no_grad(), capture_routing(model) as own:
        model(torch.tensor([seqs[1]]))
    assert torch.equal(torch.as_tensor(routes[1]), torch.stack(own))
    laid = batch_routes(routes, 41)  # (B, T, L, k), one pad column
    assert laid.shape == (2, 41, 4, 2) and torch.equal(laid[1, :25], torch.as_tensor(routes[1]).permute(1, 0, 2))
    assert torch.equal(laid[1, 30], torch.arange(2).expand(4, 2))  # padding: any valid experts
    other = copy.deepcopy(model)
    with torch.no_grad():
        for layer in other.model.layers:
            layer.mlp.router.weight.add_(torch.randn_like(layer.mlp.router.weight))
    ids = torch.full((2, 41), 263)
    ids[0, :40], ids[1, :25] = torch.tensor(seqs[0]), torch.tensor(seqs[1])
    with torch.no_grad(), replay_batch(other, laid), capture_routing(other) as got:
        a = policy_forward(other, ids).logprobs
    with torch.no_grad(), replay_routing(other, laid.permute(2, 0, 1, 3).reshape(4, -1, 2)):
        b = policy_forward(other, ids).logprobs
    assert torch.equal(a, b) and torch.equal(torch.stack(got).view(4, 2, 41, 2)[:, 0, :40], laid[0, :40].permute(1, 0, 2))
    n = len(ids[0])
    batch = Batch(ids, torch.ones_like(ids), torch.ones(2, n), torch.zeros(2, n), torch.zeros(2, n), torch.zeros(2),
                  torch.zeros(2, dtype=torch.long), torch.tensor([40, 25]), torch.zeros(2, dtype=torch.bool), laid)
    sub = batch.select([1])
    assert sub.routes is not None and sub.routes.shape == (1, 26, 4, 2)


def _route_to_the_least_likely_experts(model: torch.nn.Module) -> None:
    """Make ``model`` route every token to its k *lowest*-scoring experts (weights: the softmax of
    their logits, as GPT-OSS weighs its chosen experts): a different routing, same weights."""
    from agentgym.trainer.model.routing import routers

    def hook(_m, _inp, out):  # type: ignore[no-untyped-def]
        logits, k = out[0], out[2].shape[-1]
        idx = logits.topk(k, dim=-1, largest=False).indices
        return logits, torch.softmax(logits.gather(-1, idx), dim=-1, dtype=logits.dtype), idx

    for r in routers(model):
        r.register_forward_hook(hook)


@pytest.mark.slow
def test_routing_replay_in_training_brings_the_learner_onto_the_engines_experts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A PPO step whose engine routes differently from the learner (same weights): with
    rollout.routing_replay the learner replays the engine's experts in its old-log-prob (epochs=2),
    reference (kl_coef) and training passes and computes the engine's very log-probs; without, it
    does not."""
    from agentgym.trainer.config import load_config
    from agentgym.trainer.rollout.engines.hf import HFEngine
    from agentgym.trainer.train import Trainer

    stats = {}
    for replay in (False, True):
        over = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
                "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=24", "rollout.tasks_per_step=2",
                "rollout.samples_per_task=2", "ppo.epochs=2", "ppo.kl_coef=0.1", f"log.run_dir={tmp_path / str(replay)}",
                f"rollout.routing_replay={str(replay).lower()}", "env.kwargs={families: [arithmetic]}"]
        engine = HFEngine(build_tiny_gptoss(264, seed=0), share=False)
        _route_to_the_least_likely_experts(engine.model)
        t = Trainer(load_config("cpu-quickstart", over), engine=engine)  # synced: same weights
        stats[replay] = t.train_step(0)
        t.close()
    assert stats[False]["mismatch_abs_dlogp_max"] > 1e-2
    assert stats[True]["mismatch_abs_dlogp_max"] < 1e-4, stats[True]["mismatch_abs_dlogp_max"]
    assert stats[True]["ratio_max_first"] == pytest.approx(1.0, abs=1e-5)  # the old pass replayed too
