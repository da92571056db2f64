"""bench/gpu_check.py's wiring: the dry mode runs every step of the GPU check on CPU at tiny
shapes (the same functions the GPU run calls) and writes the JSON and markdown it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"
STEPS = ["attention", "mfu", "lora_ppo", "engine_logprobs", "gpu_tests"]


@pytest.mark.slow
def test_dry_run_writes_every_step_ok(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["dry"] is True and res["torch"] == torch.__version__ and res["device"].startswith("cpu")
    assert list(res["steps"]) == STEPS
    for name, step in res["steps"].items():
        assert step["status"] == "ok", (name, step)
        assert step["seconds"] > 0 and step["summary"]
    st = res["steps"]
    assert st["attention"]["check"] == "pass"
    assert st["attention"]["full"]["fwd_max_abs_fp32"] < 1e-5  # float32 on CPU: rounding only
    for mode in ("full", "lora"):
        run = st["mfu"][mode]
        assert run["tokens_per_s"] > 0 and run["flops_per_token"] > 0 and run["mfu"] is None  # no GPU peak on CPU
    assert st["mfu"]["lora"]["trainable"] < st["mfu"]["full"]["trainable"]
    assert "sliding-window" in res["flops_formula"] and "active" in res["flops_formula"]
    ppo = st["lora_ppo"]
    assert ppo["layers"] == ppo["of_layers"] == 4  # the tiny model fits whole in the machine's memory
    assert ppo["tokens_per_s"] > 0 and ppo["trainable"] < ppo["params"]
    # the trainer's own plan (trainer/plan.py), not a copy: its parts and peaks, compared with the measured peak
    assert ppo["estimate_gib"]["frozen base (compute dtype)"] >= 0 and ppo["planned_peak_gib"] > 0
    assert ppo["peak_over_plan"] > 0 and "peak during update" in ppo["compared"]
    eng = st["engine_logprobs"]
    assert eng["check"] == "pass" and eng["verdict"] in ("healthy", "warning", "unhealthy")
    assert eng["mismatch_k3"] is not None and eng["abs_dlogp_max"] >= 0 and eng["stats"]["n_tokens"] > 0
    tests = st["gpu_tests"]
    assert tests["tests"] >= 1 and tests["failures"] == tests["errors"] == 0
    assert "tests/trainer/test_attention.py" in tests["files"]
    md = (tmp_path / "results.md").read_text()
    assert all(f"| {name} | ok |" in md for name in STEPS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_without_a_gpu_it_says_so_and_points_to_dry(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no CUDA GPU visible" in out.stderr and "--dry" in out.stderr and "Traceback" not in out.stderr
