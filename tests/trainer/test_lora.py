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
from agentgym.trainer.model.gptoss import build_tiny_gptoss
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


def test_lora_checkpoints_hold_adapters_resume_exactly_and_export_merged(tmp_path: Path) -> None:
    """A run checkpointed every step holds the adapters only; resumed from its first checkpoint
    it ends with the uninterrupted run's adapters and metrics, bit for bit; the merged export is
    the base plus adapters, loads in transformers, and agentgym-eval --policy hf evaluates it."""
    import json
    import shutil

    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from agentgym.leaderboards.cli import eval_main
    from agentgym.trainer.metrics import read_metrics

    run = [*LORA, "ppo.steps=2", "model.lora.experts=true", "model.lora.export_merged=true",
           "log.checkpoint_every=1", "log.keep_checkpoints=0", "log.export_dtype=float32"]
    a, b = tmp_path / "a", tmp_path / "b"

    def train(run_dir: Path, *, resume: bool) -> None:
        t = Trainer(load_config("cpu-quickstart", [*run, f"log.run_dir={run_dir}"]), resume=resume)
        t.run()
        t.close()

    train(a, resume=False)
    last = a / "checkpoints" / "step-000002"
    assert (last / "model" / "adapter_model.safetensors").exists()
    assert not (last / "model" / "model.safetensors").exists() and not (a / "reference").exists()
    saved = load_file(str(last / "model" / "adapter_model.safetensors"))
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert any("experts" in k for k in saved)

    shutil.copytree(a, b)  # the same run, as if killed after its first step
    shutil.rmtree(b / "checkpoints" / "step-000002")
    (b / "checkpoints" / "LATEST").write_text("step-000001")
    train(b, resume=True)
    resumed = load_file(str(b / "checkpoints" / "step-000002" / "model" / "adapter_model.safetensors"))
    assert resumed.keys() == saved.keys() and all(torch.equal(resumed[k], saved[k]) for k in saved)
    timing = {"t_step", "t_rollout", "t_update", "t_learner_busy", "gen_s", "env_s"}

    def rows(run_dir: Path) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k not in timing and not k.startswith("t_")}
                for r in read_metrics(run_dir, "train")]

    assert rows(b) == rows(a) and len(rows(a)) == 2

    cfg = load_config("cpu-quickstart", run)
    vocab = json.loads((last / "merged" / "config.json").read_text())["vocab_size"]
    base = build_tiny_gptoss(vocab, seed=cfg.seed, **cfg.model.tiny)
    ids = torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base.eval()(input_ids=ids).logits
    adapted = PeftModel.from_pretrained(base, str(last / "model")).eval()
    merged = AutoModelForCausalLM.from_pretrained(str(last / "merged"), dtype=torch.float32).eval()
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)  # float32 export: the merge is exact up to rounding
    assert (want - base_logits).abs().max() > 1e-4  # and the adapters did change the policy
    out = tmp_path / "sub.jsonl.gz"
    assert eval_main(["--suite", "calc", "--policy", "hf", "--policy-arg", f"model={last / 'merged'}",
                      "--max-episodes", "2", "--out", str(out), "--no-progress", "--workers", "1"]) == 0


def test_a_lora_warm_start_trains_the_adapters_and_checkpoints_them(tmp_path: Path) -> None:
    """The oracle warm start runs on the adapted model: only the adapters move, and the
    checkpoint taken as PPO starts (step 0) holds the adapters only."""
    cfg = load_config("cpu-quickstart", [*LORA, f"log.run_dir={tmp_path}", "ppo.steps=1", "sft.steps=4",
                                         "sft.oracle_steps=4", "sft.batch_size=2", "sft.checkpoint_every=2",
                                         "log.keep_checkpoints=0"])
    t = Trainer(cfg)
    model = t.learner.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    t.run()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {n for n, p in model.named_parameters() if p.requires_grad}
    t.close()
    sft_ckpt = tmp_path / "checkpoints" / "step-000000" / "model"
    assert (sft_ckpt / "adapter_model.safetensors").exists() and not (sft_ckpt / "model.safetensors").exists()


def test_a_resume_that_changes_the_adapters_is_refused_and_older_runs_still_resume(tmp_path: Path) -> None:
    """model.lora's rank, alpha, targets and experts belong to a run's identity (its checkpoints
    hold those adapters); a config.yaml written before model.lora existed counts as rank 0."""
    import yaml

    from agentgym.trainer.checkpoint import check_resume_identity
    from agentgym.trainer.config import config_to_dict

    lora = load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config_to_dict(lora)))
    check_resume_identity(tmp_path, lora)
    with pytest.raises(ConfigError, match=r"model.lora.rank=4, not 0.*model.lora.experts=False, not True"):
        check_resume_identity(tmp_path, load_config("cpu-quickstart", [*SMALL, "model.lora.experts=true"]))
    older = config_to_dict(load_config("cpu-quickstart", SMALL))
    del older["model"]["lora"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(older))
    check_resume_identity(tmp_path, load_config("cpu-quickstart", SMALL))
    with pytest.raises(ConfigError, match="model.lora.rank=0, not 8"):
        check_resume_identity(tmp_path, load_config("cpu-quickstart", [*SMALL, "model.lora.rank=8"]))
