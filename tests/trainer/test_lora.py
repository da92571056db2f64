"""LoRA with PEFT on the tiny GPT-OSS (model.lora): adapters on attention and on the fused
experts train through PPO on MathCalc-v1, the base stays bit-identical, the KL reference is the
base (adapters disabled, no copy), checkpoints hold the adapters only and resume exactly, and
the merged export loads in transformers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.config import load_config
from agentgym.trainer.model import build_tiny_gptoss
from agentgym.trainer.train import Trainer

from tests.trainer.test_train import SMALL

pytest.importorskip("peft")

# The entropy bonus gives every step a gradient even when all rewards of a group tie (the
# untrained tiny model rarely scores), so the adapters move from the first step on.
LORA = [*SMALL, "model.lora.rank=4", "model.lora.alpha=8", "ppo.kl_coef=0.1", "ppo.kl_estimator=k3",
        "ppo.entropy_coef=0.01"]


def _is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def test_lora_trains_only_adapters_and_the_reference_is_the_base(tmp_path: Path) -> None:
    """Two PPO steps with adapters on attention and experts: exactly the adapter weights change
    (attention and expert ones), every base weight is bit-identical, AdamW holds the adapters
    only, the first ratio is exactly 1, and the reference's logits are the untouched base's."""
    cfg = load_config("cpu-quickstart", [*LORA, f"log.run_dir={tmp_path}", "ppo.steps=2",
                                         "model.lora.experts=true"])
    t = Trainer(cfg)
    model = t.learner.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(_is_adapter(n) for n in trainable)
    assert any("mlp.experts" in n for n in trainable) and any("self_attn.q_proj" in n for n in trainable)
    in_optimizer = {id(p) for g in t.learner.optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    m0 = t.train_step(0)
    assert m0["ratio_max_first"] == 1.0 and m0["ratio_min_first"] == 1.0  # the learner's own log-probs
    t.train_step(1)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == trainable  # every adapter moved (experts' too: they got gradients); no base weight did
    assert not (t.learner.cfg.log.run_dir and (tmp_path / "reference").exists())  # no second copy saved

    base = build_tiny_gptoss(t.learner.tokenizer.vocab_size, seed=cfg.seed, **cfg.model.tiny)
    base.eval()
    ids = torch.randint(0, t.learner.tokenizer.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        with t.learner.ref_model.active() as ref:
            ref_logits = ref(input_ids=ids).logits
        policy_logits = model(input_ids=ids).logits
        base_logits = base(input_ids=ids).logits
    torch.testing.assert_close(ref_logits, base_logits, rtol=0, atol=1e-5)
    assert (policy_logits - base_logits).abs().max() > 1e-4  # the adapters act in the policy
    t.close()


def test_lora_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="model.lora.rank: expected 0"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=-1"])
    with pytest.raises(ConfigError, match="no adapters to train"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "model.lora.targets=[]"])
    with pytest.raises(ConfigError, match="rollout.engine_weights=shared only so far"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "rollout.engine_weights=copy"])
    load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "model.lora.targets=[]", "model.lora.experts=true"])
