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


def test_merged_weights_are_peft_merge_under_the_base_names_and_leave_the_learner_alone() -> None:
    """What the vllm engine's sync reads with LoRA (lora.MergedWeights): the base model's own names
    in its order, each adapted weight equal to PEFT's merge_and_unload (attention W + (alpha/r) B A,
    the per-expert delta on gate_up_proj and down_proj), the rest the base's; the adapted model's
    tensors are not written, and a plain model loaded with them computes the adapted logits."""
    import copy

    from agentgym.trainer.config import LoRAConfig
    from agentgym.trainer.model.lora import MergedWeights, add_adapters

    model = build_tiny_gptoss(300, seed=0, num_hidden_layers=2)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    names = list(base)
    peft = add_adapters(model, LoRAConfig(rank=4, alpha=8, experts=True))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:  # as after some updates (B starts at 0)
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(n)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = MergedWeights(peft).state_dict()
    assert list(merged) == names
    want = copy.deepcopy(peft).merge_and_unload().state_dict()
    adapted = {k for k in names if k.endswith(("_proj.weight", "gate_up_proj", "down_proj"))}
    assert len(adapted) == 2 * 6
    for k in names:
        assert torch.equal(merged[k], want[k]), k
        assert torch.equal(merged[k], base[k]) == (k not in adapted), k
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # no merge in place
    plain = build_tiny_gptoss(300, seed=1, num_hidden_layers=2)
    plain.load_state_dict(dict(merged.items()))
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(input_ids=ids).logits, model.eval()(input_ids=ids).logits,
                                   rtol=0, atol=1e-5)


def test_an_adapted_output_head_acts_in_every_head_implementation() -> None:
    """``model.lora.targets`` may name ``lm_head`` (the final norm and a frozen head cap the
    logits' range: on the twin's warm start every answer token sat at its cap). PEFT then wraps
    the head, and the wrapper's ``.weight`` is the base's alone: the fused head (CUDA's default)
    must not read it, or the learner scores the base head while the engine samples the adapted
    one. Both heads give the adapted model's own log-probs, and the head's adapters get gradients."""
    from agentgym.trainer.config import LoRAConfig
    from agentgym.trainer.model.logprobs import policy_forward
    from agentgym.trainer.model.lora import add_adapters

    model = build_tiny_gptoss(300, seed=0, num_hidden_layers=2)
    add_adapters(model, LoRAConfig(rank=4, alpha=8, targets=["q_proj", "lm_head"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:  # as after some updates (B starts at 0)
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(n)))
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=ids).logits.float()[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    for head in ("chunked", "fused"):
        model.zero_grad()
        out = policy_forward(model, ids, head=head, with_entropy=False)
        torch.testing.assert_close(out.logprobs[:, 1:], want, rtol=0, atol=1e-5, msg=head)
        out.logprobs.sum().backward()
        head_adapters = [p.grad for n, p in model.named_parameters() if n.startswith("lm_head.lora_")]
        assert len(head_adapters) == 2 and all(g is not None and g.abs().max() > 0 for g in head_adapters), head


def test_lora_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="model.lora.rank: expected 0"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=-1"])
    with pytest.raises(ConfigError, match="no adapters to train"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "model.lora.targets=[]"])
    with pytest.raises(ConfigError, match="rollout.engine_weights=shared only so far"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "rollout.engine_weights=copy"])
    with pytest.raises(ConfigError, match=r"runs with rollout.engine=hf .* or vllm .*got rollout.engine=openai-http"):
        load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "rollout.engine=openai-http"])
    load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "model.lora.targets=[]", "model.lora.experts=true"])
    load_config("cpu-quickstart", [*SMALL, "model.lora.rank=4", "rollout.engine=vllm"])  # merged at each sync


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


@pytest.mark.slow
def test_lora_ppo_on_attention_experts_and_head_beats_its_warm_start_and_its_merged_export_scores_the_same(
        tmp_path: Path) -> None:
    """The LoRA twin of tests/trainer/test_e2e.py (rank 8 on attention, on every expert and on the
    output head; the rest frozen): the one-answer Math-v1 task ("reply with the number 7"). The
    base is the e2e test's full 30-step oracle warm start (LoRA adapts a trained model: on the
    random tiny model a LoRA warm start stalled at an SFT loss of 3.07 nats, greedy 24/24 right
    but 0/96 sampled at T=1); then 20 PPO steps on the adapters only, evaluated on 24 held-out
    problems x 4 samples at T=1. The training reward rises and held-out success beats the warm
    start; the learner scores what it sampled, and the merged export (the last checkpoint's
    ``merged/``), loaded as a plain model by a fresh trainer, scores the same held-out problems as
    the adapted policy did. PPO's lr is the e2e test's times 3, picked once, not tuned. Exact
    resume of a LoRA run (experts included) is the checkpoint test above.

    Why the head has an adapter: the final norm fixes the RMS of the last hidden state, so a
    frozen ``lm_head`` bounds how sure the policy can be of any token. On this warm start every
    token of the answer ``<|channel|>final<|message|>7<|return|>`` already sits at its bound
    (p 0.93-0.95 each; at most 0.55 for the whole answer at T=1; seeds 0-2: 0.55, 0.60, 0.55),
    which is where the warm start's sampled success is. Attention and experts alone, LoRA or full
    rank, only move the hidden state, so they cannot raise it: on one fixed batch, 10 updates of
    either lowered the failures' log-prob (-11.7 -> -14.7 nats) and left the successes' where
    they were (-0.60 -> -0.70 LoRA, -0.73 full rank), where LoRA with the head adapted raised
    them (-0.60 -> -0.39), as full fine-tuning does (-0.28)."""
    import json

    from agentgym.trainer.controls import final_eval, warm_eval
    from agentgym.trainer.evaluation import gain
    from agentgym.trainer.metrics import read_metrics

    data = tmp_path / "say7.jsonl"
    data.write_text("".join(json.dumps({"id": f"say-{i}", "question": f"Request {i}: reply with the number 7.",
                                        "answer": "7"}) + "\n" for i in range(200)))
    common = [
        "seed=0", "threads=1", "env.id=agentgym/Math-v1", f"env.kwargs={{dataset: {data}}}", "env.reward_mode=sparse",
        "env.max_turns=1", "env.max_action_tokens=48", "env.prompt=harmony", "rollout.temperature=1.0",
        "log.eval_every=20", "log.eval_episodes=24", "log.eval_episodes_final=0", "log.eval_samples=4",
        "log.eval_seed_start=0", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false",
        "log.plots=false", "controls=[]", "sft.check_every=0", "sft.min_wellformed=0",
        "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null"]

    def run(run_dir: Path, *args: str) -> None:
        t = Trainer(load_config("cpu-quickstart", [*common, f"log.run_dir={run_dir}", *args]))
        t.run()
        t.close()

    base, lora = tmp_path / "base", tmp_path / "lora"
    run(base, "sft.steps=30", "sft.batch_size=8", "sft.teacher=oracle", "sft.lr=3e-3", "sft.schedule=cosine",
        "sft.warmup_steps=5", "ppo.steps=0")
    run(lora, f"model.init_from={base / 'warm_start'}", "sft.steps=0", "model.lora.rank=8", "model.lora.alpha=16",
        "model.lora.experts=true", "model.lora.targets=[q_proj,k_proj,v_proj,o_proj,lm_head]",
        "model.lora.export_merged=true", "log.export_dtype=float32",
        "ppo.steps=20", "ppo.lr=3e-3", "ppo.warmup_steps=2", "ppo.kl_coef=0", "ppo.group_std_normalize=true",
        "ppo.baseline_scale=1", "rollout.tasks_per_step=4", "rollout.samples_per_task=8", "correction.mode=seq_tis")
    warm, ppo = warm_eval(base), final_eval(lora)
    assert ppo is not None and warm is not None and ppo["sampled_problems"] >= 20
    own = gain(warm, ppo, "sampled_")  # the LoRA run - its warm start, paired on the same held-out problems
    train = read_metrics(lora, "train")
    first, last = (sum(r["reward_mean"] for r in rows) / 5 for rows in (train[:5], train[-5:]))
    summary = (f"held-out sampled success: warm start {warm['sampled_success']:.3f} -> LoRA PPO "
               f"{ppo['sampled_success']:.3f} ({own}); train reward first 5 steps {first:.3f} -> last 5 {last:.3f}")
    # measured (lr 3e-3; warm start -> LoRA PPO on held-out, paired gain and z; train reward over
    # the first and last 5 steps), seeds 0-4: 0.625 -> 0.823 (+0.198, z 4.7; 0.544 -> 0.781),
    # 0.625 -> 0.813 (+0.188, z 4.6; 0.556 -> 0.800), 0.583 -> 0.833 (+0.250, z 5.0; 0.619 -> 0.719),
    # 0.583 -> 0.781 (+0.198, z 4.0; 0.637 -> 0.731), 0.604 -> 0.781 (+0.177, z 5.6; 0.637 -> 0.744).
    # Without the head's adapter (attention and experts only) the same seeds gained -0.031 to +0.010
    # (z -1.8 to 0.6), and full-rank training of attention and experts with the rest frozen (lr 1e-3,
    # seed 0) 0.625 -> 0.563 (z -2.8): no learning, as the bound above says. Full fine-tuning from
    # the same base, fresh AdamW at lr 1e-3: 0.792 (z 4.7); with the warm start's AdamW: 0.833 (test_e2e.py).
    assert own is not None and own["problems"] == 24, summary
    assert own["gain"] >= 0.1 and own["z"] >= 2.5, summary
    assert last > first + 0.05, summary
    assert max(r["mismatch_abs_dlogp_max"] for r in train) < 1e-3  # the learner scores what it sampled

    merged = lora / "checkpoints" / "step-000020" / "merged"
    assert (merged / "model.safetensors").exists() and not (merged / "adapter_model.safetensors").exists()
    check = Trainer(load_config("cpu-quickstart", [*common, f"log.run_dir={tmp_path / 'merged-eval'}",
                                                   f"model.init_from={merged}", "sft.steps=0", "ppo.steps=0"]))
    assert check.learner.peft is None  # a plain model: the adapters are in its weights
    again = check.evaluator.evaluate("ppo", 0, full=True)
    check.close()
    assert again["sampled_problems"] == ppo["sampled_problems"]
    # the same problems and sampling seeds: the same answers up to float rounding of the merge
    assert abs(again["sampled_success"] - ppo["sampled_success"]) <= 0.05, (again, ppo, summary)
    print(summary, f"; merged export {again['sampled_success']:.3f}")
