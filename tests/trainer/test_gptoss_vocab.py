"""A tiny GPT-OSS with GPT-OSS's real 201,088-id vocabulary and its own tokenizer, end to end
through the trainer (marker ``harmony``: under CI a skip is a failure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.model.gptoss import load_policy, resolve_tokenizer

pytestmark = pytest.mark.harmony


@pytest.fixture(autouse=True)
def _needs_harmony() -> None:
    pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")


def test_tiny_model_for_gptoss_tokenizer() -> None:
    tok = resolve_tokenizer("tiny:o200k_harmony")
    assert tok.vocab_size == 201_088 and resolve_tokenizer("tiny:gpt-oss") is tok
    model = load_policy("tiny:o200k_harmony")
    assert model.config.vocab_size == 201_088 and model.config.pad_token_id == 199_999
    assert model.lm_head.weight.shape == (201_088, 128)
    with pytest.raises(ConfigError, match="tiny:o200k_harmony"):
        resolve_tokenizer("tiny:o200k")


def test_ppo_step_on_the_real_vocabulary(tmp_path: Path) -> None:
    """MathCalc-v1 in GPT-OSS's own tokens (harmony prompt), sampled by the hf engine, one exactly
    on-policy PPO update of the tiny model with the 201,088-id head."""
    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    cfg = load_config("cpu-quickstart", [
        "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=12", "env.prompt=harmony",
        "rollout.tasks_per_step=1", "rollout.samples_per_task=2", "model.name=tiny:o200k_harmony",
        "model.tiny={num_hidden_layers: 2}", "correction.mode=none", f"log.run_dir={tmp_path}"])
    trainer = Trainer(cfg)
    assert trainer.learner.tokenizer.vocab_size == 201_088
    m = trainer.train_step(0)
    assert m["ratio_min_first"] == 1.0 and m["ratio_max_first"] == 1.0
    assert m["mismatch_abs_dlogp_max"] < 1e-3
    trainer.close()
