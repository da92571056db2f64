"""The dry run of a recipe: process layout, engine/learner consistency, memory per GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.cli import main
from agentgym.trainer.config import load_config
from agentgym.trainer.plan import GIB, check_engine_checkpoint, make_plan

RECIPE = "gptoss-20b-8gpu-vllm"


def test_the_20b_recipe_is_consistent_and_fits_8_gpus_of_80_gb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run", "--config", RECIPE]) == 0
    out = capsys.readouterr().out
    assert "4 x vllm (tensor parallel 2)" in out and "20.91 B" in out and "consistent, fits" in out
    plan = make_plan(load_config(RECIPE))
    assert plan.problems == []
    # float32 master weights + AdamW (12 bytes per parameter) sharded over 8 ranks
    assert plan.memory["master weights fp32"] + plan.memory["AdamW state fp32"] == pytest.approx(
        12 * 20.91e9 / 8, rel=0.01)
    assert max(plan.memory["peak during rollout"], plan.memory["peak during update"]) < 0.95 * 80 * GIB
    assert plan.memory["engine KV cache"] > 4 * GIB


@pytest.mark.parametrize("override, problem", [
    ("distributed.rollout_tp=3", "does not divide the 8 processes"),
    ("rollout.engine_kwargs.tensor_parallel_size=4", "tensor_parallel_size=4 but distributed.rollout_tp=2"),
    ("rollout.engine_kwargs.model=openai/gpt-oss-20b", "MXFP4"),
    ("rollout.engine_kwargs.dtype=float16", "engine dtype"),
    ("rollout.engine_kwargs.enable_sleep_mode=false", "enable_sleep_mode"),
    ("distributed.gpu_memory_gib=40", "95% of 40 GiB"),
    ("rollout.tasks_per_step=6", "not a multiple of the 4 rollout engines"),
    ("model.attn_implementation=flash_attention_2", "drops GPT-OSS attention sinks"),
    ("ppo.kl_coef=0.1", None),  # a KL reference adds 4.9 GiB and still fits
])
def test_inconsistent_layouts_are_named(override: str, problem: str | None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    plan = make_plan(load_config(RECIPE, [override]))
    if problem is None:
        assert plan.problems == [] and plan.memory["KL reference"] > 4 * GIB
        return
    assert any(problem in p for p in plan.problems), plan.problems
    assert main(["--dry-run", "--config", RECIPE, override]) == 2
    assert "NOT consistent" in capsys.readouterr().out


def test_a_local_mxfp4_checkpoint_is_refused_as_engine_weights(tmp_path: Path) -> None:
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.model.mxfp4 import save_mxfp4

    save_mxfp4(build_tiny_gptoss(264, seed=0), tmp_path / "mx")
    with pytest.raises(ConfigError, match="bf16 weights"):
        check_engine_checkpoint(str(tmp_path / "mx"))
    check_engine_checkpoint(str(tmp_path / "nothing-here"))  # unknown: nothing to refuse


def test_the_cpu_quickstart_plans_too() -> None:
    plan = make_plan(load_config("cpu-quickstart"))
    assert plan.problems == [] and plan.model["parameters"] == "0.00 B"


@pytest.mark.parametrize("dtype, ckpt", [("float32", False), ("bfloat16", True)])
def test_the_memory_plan_is_within_10_percent_of_a_measured_step(dtype: str, ckpt: bool) -> None:
    """The dry run's "peak during update" against a real learner update on CPU, measured as live
    tensor bytes (bench/trainer_memory.py --mode plan: the full table is in bench/RESULTS.md)."""
    import json
    import subprocess
    import sys

    bench = Path(__file__).parents[2] / "bench" / "trainer_memory.py"
    case = [{"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 384, "num_local_experts": 4}, 192, 768,
            dtype, ckpt]
    out = subprocess.run([sys.executable, str(bench), "--child", "--mode", "plan", "--plan-case", json.dumps(case)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0.9 < r["plan"] / r["measured"] < 1.1, r


LORA_RECIPE = "gptoss-20b-1gpu-lora"


@pytest.mark.parametrize("gib", [80, 141])
def test_the_1gpu_lora_recipe_fits_an_h100_and_an_h200(gib: int, capsys: pytest.CaptureFixture[str]) -> None:
    override = f"distributed.gpu_memory_gib={gib}"
    assert main(["--dry-run", "--config", LORA_RECIPE, override]) == 0
    out = capsys.readouterr().out
    assert "consistent, fits" in out and f"{gib} GiB per GPU" in out and "adapters (trained): 8.0 M" in out
    m = make_plan(load_config(LORA_RECIPE, [override])).memory
    assert m["frozen base (compute dtype)"] == pytest.approx(2 * 20.91e9, rel=0.01)  # bf16, no master copy
    assert m["AdamW state fp32"] == 8 * 7_962_624  # the rank-16 attention adapters only
    assert m["KL reference"] == 0 and m["engine awake"] == 0  # adapters off; the hf engine shares the weights
    assert max(m["peak during rollout"], m["peak during update"]) < 0.95 * gib * GIB


@pytest.mark.parametrize("overrides, problem", [
    (["model.lora.rank=0"], "> 95% of 80 GiB per GPU (largest part: AdamW state fp32"),
    (["env.max_tokens=65535", "ppo.micro_batch_tokens=65536"], "> 95% of 80 GiB per GPU"),
])
def test_the_1gpu_recipe_refuses_what_does_not_fit(overrides: list[str], problem: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    plan = make_plan(load_config(LORA_RECIPE, overrides))
    assert any(problem in p and "\n" not in p for p in plan.problems), plan.problems
    assert main(["--dry-run", "--config", LORA_RECIPE, *overrides]) == 2
    assert "NOT consistent" in capsys.readouterr().out


def test_the_1gpu_recipe_with_vllm_counts_the_engines_merged_copy() -> None:
    """LoRA reaches a vLLM engine merged into its own weights: the plan adds the engine's share of
    the GPU and the float32 merge buffer to what the hf layout needs."""
    hf = make_plan(load_config(LORA_RECIPE))
    vllm = make_plan(load_config(LORA_RECIPE, ["rollout.engine=vllm", "rollout.sleep_level=0"]))
    share = 0.3 * 80 * 2**30  # gpu_memory_utilization's default share of an 80 GiB GPU
    assert vllm.memory["engine awake"] == pytest.approx(share)
    assert vllm.memory["weight sync buffers"] > 256 * 2**20  # a merged float32 tensor and one bucket
    assert vllm.memory["peak during update"] - hf.memory["peak during update"] == pytest.approx(share, rel=0.01)
    assert "merged" in vllm.layout["weight sync"]


@pytest.mark.parametrize("experts", [False, True])
def test_the_plan_counts_the_adapters_of_a_real_peft_model(experts: bool) -> None:
    from agentgym.trainer.config import LoRAConfig
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.model.lora import add_adapters
    from agentgym.trainer.plan import count_parameters

    tiny = {"num_hidden_layers": 2, "hidden_size": 96, "intermediate_size": 160, "num_local_experts": 3}
    lora = LoRAConfig(rank=4, experts=experts)
    model = build_tiny_gptoss(264, seed=0, **tiny)
    add_adapters(model, lora)
    real = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count_parameters(model.config, lora)["adapters"] == real
    H, q, kv, E, Im = 96, model.config.num_attention_heads * model.config.head_dim, \
        model.config.num_key_value_heads * model.config.head_dim, 3, 160
    per_layer = 4 * ((H + q) * 2 + (H + kv) * 2) + (E * 4 * ((H + 2 * Im) + (Im + H)) if experts else 0)
    assert real == 2 * per_layer  # r * (in + out) per target, one adapter per expert


@pytest.mark.parametrize("dtype, ckpt, experts", [("float32", False, False), ("bfloat16", True, True)])
def test_the_lora_plan_is_within_10_percent_of_a_measured_update(dtype: str, ckpt: bool, experts: bool) -> None:
    """One real LoRA PPO update on CPU (PEFT adapters, the base frozen in the compute dtype), its
    peak of live tensor bytes against the plan's "peak during update" (bench/RESULTS.md)."""
    import json
    import subprocess
    import sys

    bench = Path(__file__).parents[2] / "bench" / "trainer_memory.py"
    case = [{"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 384, "num_local_experts": 4}, 256, 1024,
            dtype, ckpt, {"rank": 8, "experts": experts}]
    out = subprocess.run([sys.executable, str(bench), "--child", "--mode", "plan", "--plan-case", json.dumps(case)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0.9 < r["plan"] / r["measured"] < 1.1, r


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (Path(__file__).parents[2] / "trainer" / "recipes").glob("*.yaml")))
def test_every_shipped_recipe_passes_its_dry_run(recipe: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run", "--config", recipe]) == 0, capsys.readouterr().out


# Each process-layout rule, as (overrides of cpu-quickstart, the world torchrun starts, its message).
LAYOUT_RULES = [
    (["distributed.nproc=4", "distributed.rollout_tp=3"], 4,
     "distributed.rollout_tp=3 does not divide the 4 processes"),
    (["distributed.nproc=4", "rollout.tasks_per_step=3"], 4,
     "rollout.tasks_per_step=3 is not a multiple of the 4 rollout engines"),
    (["distributed.nproc=2", "distributed.rollout_tp=2", "rollout.tasks_per_step=1", "rollout.samples_per_task=3"], 2,
     "3 episodes per engine do not split over its 2 ranks"),
    (["distributed.nproc=4", "rollout.tasks_per_step=4", "rollout.samples_per_task=2", "ppo.minibatches=3"], 4,
     "ppo.minibatches=3 exceeds the 2 episodes each rank learns on"),
    (["distributed.nproc=2", "model.lora.rank=4", "controls=[]"], 2, "model.lora.rank=4 runs in one process, not 2"),
    (["distributed.nproc=2", "model.device=cuda", "distributed.backend=gloo"], 2,
     "distributed.backend=gloo on CUDA"),
]


@pytest.mark.parametrize("overrides, world, message", LAYOUT_RULES)
def test_each_layout_rule_is_refused_with_one_message_by_the_dry_run_and_by_a_real_start(
        overrides: list[str], world: int, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dry run lists the rule's message (exit 2); a start under torchrun with that many
    processes refuses the same message before it joins the process group."""
    from agentgym.trainer.learner import Learner

    cfg = load_config("cpu-quickstart", overrides)
    assert any(message in p for p in make_plan(cfg).problems), make_plan(cfg).problems
    monkeypatch.setenv("WORLD_SIZE", str(world))  # what torchrun sets: this process is rank 0 of `world`
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ConfigError, match="torchrun started") as e:
        Learner(cfg)
    assert message in str(e.value)


def test_a_start_with_another_world_than_the_recipe_names_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.trainer.distributed import Layout, init_distributed, layout_problems

    layout = Layout.of(load_config("cpu-quickstart", ["distributed.nproc=2"]))
    assert layout_problems(layout, 2) == []  # the dry run plans for the recipe's own world
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError, match=r"distributed.nproc=2 but 4 processes were started; run torchrun "
                                          r"--nproc_per_node 2"):
        init_distributed(layout)
