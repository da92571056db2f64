"""Held-out success on a grid of evaluation options: the cells of a product, every run plays the
same problems with the same random numbers, records are kept beside the run, and two runs pair
problem by problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.config import load_config
from agentgym.trainer.grid import GRID_FILE, cell_name, grid_differences, grid_eval, parse_grid, stored_grid
from agentgym.trainer.train import Trainer

TINY = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "env.max_turns=4", "env.max_action_tokens=48", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "log.eval_episodes=4", "log.eval_episodes_final=0", "log.eval_samples=2", "sft.batch_size=4",
        "sft.check_every=0", "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null", "sft.min_wellformed=0",
        "controls=[]", "ppo.steps=0", "sft.steps=2"]


def test_parse_grid_is_the_product_of_its_axes() -> None:
    cells = parse_grid(["depth=1,2", "fail_rate=0,0.3"])
    assert cells == [{"depth": 1, "fail_rate": 0}, {"depth": 1, "fail_rate": 0.3},
                     {"depth": 2, "fail_rate": 0}, {"depth": 2, "fail_rate": 0.3}]
    assert cell_name(cells[1]) == "depth=1,fail_rate=0.3"
    for bad in ("depth", "=1,2", "depth="):
        with pytest.raises(ConfigError, match="KEY=V1,V2"):
            parse_grid([bad])


def test_grid_eval_plays_the_same_problems_for_every_run_and_pairs_them(tmp_path: Path) -> None:
    runs = {}
    for name, lr in (("a", 1e-3), ("b", 5e-2)):
        run = tmp_path / name
        Trainer(load_config("cpu-lookup", [*TINY, f"log.run_dir={run}", f"sft.lr={lr}"])).run()
        runs[name] = run
    cells = parse_grid(["depth=1,4", "fail_rate=0.5"])
    recs = {n: grid_eval(r, cells, problems=3, samples=2, seed_start=7_000) for n, r in runs.items()}
    for rec in recs.values():
        assert set(rec) == {"depth=1,fail_rate=0.5", "depth=4,fail_rate=0.5"}
        for r in rec.values():
            assert r["sampled_episodes"] == 6 and r["episodes"] == 3 and r["sampled_samples"] == 2
            assert len(r["sampled_outcomes"]) == 6 and len(r["outcomes"]) == 3
    # the same held-out problems in every run (and different ones per cell)
    hashes = {n: {c: r["problems_hash"] for c, r in rec.items()} for n, rec in recs.items()}
    assert hashes["a"] == hashes["b"]
    assert hashes["a"]["depth=1,fail_rate=0.5"] != hashes["a"]["depth=4,fail_rate=0.5"]
    # kept beside the run and read back, not recomputed
    stored = json.loads((runs["a"] / GRID_FILE).read_text())
    assert len(stored) == 1
    assert grid_eval(runs["a"], cells, problems=3, samples=2, seed_start=7_000) == recs["a"]
    # a run against itself differs by exactly 0; a and b pair on the same problems
    per_seed = {0: {"a": recs["a"], "b": recs["b"], "a2": recs["a"]}}
    d = grid_differences(per_seed, "depth=1,fail_rate=0.5", [("a", "a2"), ("b", "a")], "sampled_")
    assert d["a - a2"] == {0: 0.0}
    assert 0 in d["b - a"] and -1.0 <= d["b - a"][0] <= 1.0
    with pytest.raises(ConfigError, match="train it first"):
        grid_eval(tmp_path / "nothing", cells, problems=3, samples=2, seed_start=0)
    # the command line: a grid stored by the library is read back and printed; a new one is computed
    assert stored_grid(runs["b"], cells, problems=3, samples=2, seed_start=7_000) == recs["b"]
    assert stored_grid(runs["b"], cells, problems=2, samples=2, seed_start=7_000) is None
    mod = [sys.executable, "-m", "agentgym.trainer.grid"]
    cli = [*mod, str(runs["a"]), str(runs["b"]), "--grid", "depth=1,4", "fail_rate=0.5", "--problems", "3",
           "--samples", "2", "--seed-start", "7000"]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=300, check=True).stdout
    a1 = recs["a"]["depth=1,fail_rate=0.5"]
    assert f"  {'depth=1,fail_rate=0.5':<28} {a1['sampled_success']:.3f}  {a1['success']:.3f}" in out, out
    one = [{"depth": 1, "fail_rate": 0.5}]
    assert stored_grid(runs["b"], one, problems=2, samples=2, seed_start=7_000) is None
    subprocess.run([*mod, str(runs["b"]), "--grid", "depth=1", "fail_rate=0.5", "--problems", "2", "--samples", "2",
                    "--seed-start", "7000"], capture_output=True, text=True, timeout=300, check=True)
    assert set(stored_grid(runs["b"], one, problems=2, samples=2, seed_start=7_000) or {}) == {"depth=1,fail_rate=0.5"}
    bad = subprocess.run([*mod, str(tmp_path / "nothing"), "--grid", "depth=1"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "expected a run dir with config.yaml" in bad.stderr and "Traceback" not in bad.stderr


def test_the_recovery_bench_counts_what_a_policys_episodes_did_after_faults(tmp_path: Path) -> None:
    """bench/lookup_recovery.py plays a finished run's final weights on Lookup-v1 problems and
    counts the episodes by fault and outcome; a dir with no finished run is one clear line."""
    run = tmp_path / "warm"
    Trainer(load_config("cpu-lookup", [*TINY, f"log.run_dir={run}"])).run()
    bench = [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "lookup_recovery.py")]
    out = subprocess.run([*bench, str(run), "--problems", "6", "--depth", "2", "--fail-rate", "0.5",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300, check=True)
    c = json.loads((tmp_path / "r.json").read_text())["runs"][str(run)]
    assert c["episodes"] == 6 and c["met_fault"] + c["no_fault"] == 6
    assert c["faults"] >= c["met_fault"]  # (a policy 2 SFT steps in calls nothing: what it did is in test_lookup.py)
    assert 0 <= c["met_fault_solved"] <= c["met_fault"] and 0 <= c["faults_retried"] <= c["faults"]
    assert f"{c['met_fault_solved']:>11} of {c['met_fault']:<5}" in out.stdout, out.stdout
    bad = subprocess.run([*bench, str(tmp_path / "nothing")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "train it first" in bad.stderr and "Traceback" not in bad.stderr
