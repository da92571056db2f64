"""A config is checked before anything is allocated, and every problem is one line.

* numbers are finite (``ppo.lr=inf`` would save a NaN warm start, ``kl_coef=nan`` turn the KL
  off) and integers fit 63 bits (a seed above 2^64, a 5,000-digit number);
* sizes are checked against this machine, on the CPU too: the dry run and a real start refuse
  10^18 episodes per step, ``sft.batch_size=1e9`` and a tiny model of billions of parameters;
* unknown keys are refused everywhere, ``model.tiny`` included;
* a recipe that is a directory, a binary file or YAML nested 5,000 deep is a config error
  (exit 2, one line, no traceback), not a crash.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.cli import main
from agentgym.trainer.config import RECIPES_DIR, load_config
from agentgym.trainer.plan import machine_memory, make_plan, memory_problems

BIG_TINY = "model.tiny={hidden_size: 8192, intermediate_size: 8192, num_hidden_layers: 10, num_local_experts: 4}"


@pytest.mark.parametrize("override, needle", [
    ("ppo.lr=inf", "ppo.lr: expected a finite number, got inf"),
    ("sft.lr=.inf", "sft.lr: expected a finite number, got inf"),
    ("ppo.kl_coef=nan", "ppo.kl_coef: expected a finite number, got nan"),
    ("ppo.lr=-.inf", "ppo.lr: expected a finite number"),
    ("correction.lo=nan", "correction.lo: expected a finite number"),  # float | None
    ("ppo.lr=1e999", "expected a finite number"),
    (f"seed={2 ** 64 + 1}", "seed: expected an integer of at most 63 bits"),
    ("seed=-1", "seed: expected >= 0"),
    ("sft.seed=-5", "sft.seed: expected >= 0"),
    ("ppo.steps=1e400", "ppo.steps: expected an integer, got inf"),
    ("seed=" + "9" * 5000, "integers below 2^63"),
    ("model.tiny.hidden_sise=64", "did you mean 'model.tiny.hidden_size'?"),
    ("model.name=/some/model model.tiny.hidden_size=64", "model.tiny="),
])
def test_bad_numbers_and_keys_are_one_line_config_errors(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        cfg = load_config("cpu-quickstart", override.split(" "))
        make_plan(cfg)  # model.tiny's keys are checked where the tiny config is built
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_numbers_written_the_yaml_1_1_way_still_read() -> None:
    cfg = load_config("cpu-quickstart", ["sft.batch_size=1e3", "ppo.lr=1e-3", "seed=7013"])
    assert (cfg.sft.batch_size, cfg.ppo.lr, cfg.seed) == (1000, 1e-3, 7013)


def _recipe_files(tmp: Path) -> dict[str, Path]:
    files = {"directory": tmp / "a-folder", "binary": tmp / "binary.yaml", "deep": tmp / "deep.yaml",
             "deep-kwargs": tmp / "deep-kwargs.yaml", "digits": tmp / "digits.yaml", "seed": tmp / "seed.yaml",
             "not-yaml": tmp / "broken.yaml", "list": tmp / "list.yaml"}
    files["directory"].mkdir()
    files["binary"].write_bytes(bytes(range(256)) * 8)
    files["deep"].write_text("seed: " + "[" * 5000 + "]" * 5000)
    files["deep-kwargs"].write_text("env:\n  kwargs:\n    a: " + "[" * 60 + "]" * 60)
    files["digits"].write_text("seed: " + "7" * 5000)
    files["seed"].write_text(f"seed: {2 ** 64 + 3}\n")
    files["not-yaml"].write_text("ppo: [1, 2\n  lr: {\n")
    files["list"].write_text("- 1\n- 2\n")
    return files


@pytest.mark.parametrize("case, needle", [
    ("directory", "expected a YAML file, got a directory"),
    ("binary", "expected a UTF-8 YAML text file, got binary data"),
    ("deep", "nested at most 32 deep"),
    ("deep-kwargs", "nested at most 32 deep"),
    ("digits", "integers below 2^63"),
    ("seed", "seed: expected an integer of at most 63 bits"),
    ("not-yaml", "not valid YAML"),
    ("list", "expected a mapping at the top level"),
])
def test_every_recipe_file_problem_is_one_line(case: str, needle: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe_files(tmp_path)[case]
    for mode in (["--print-config"], ["--dry-run"], []):
        assert main([*mode, "--config", str(recipe), f"log.run_dir={tmp_path / 'run'}"]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_device_file_is_not_read_as_a_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-config", "--config", "/dev/zero"]) == 2  # would read forever
    assert "expected a regular YAML file" in capsys.readouterr().err


@pytest.mark.parametrize("overrides", [
    ["rollout.tasks_per_step=1000000000000000000"],
    ["sft.steps=5", "sft.batch_size=1e9"],
    [BIG_TINY],
])
def test_sizes_beyond_this_machine_are_refused_by_the_dry_run_and_a_real_start(
        overrides: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = [f"log.run_dir={tmp_path / 'run'}", *overrides]
    assert main(["--dry-run", "--config", "cpu-quickstart", *run]) == 2
    out = capsys.readouterr().out
    assert "verdict: NOT consistent" in out and "host memory: the plan needs" in out
    assert f"this machine's {machine_memory() / (1 << 30):.1f} GiB" in out
    assert main(["--config", "cpu-quickstart", *run]) == 2
    err = capsys.readouterr().err
    assert "host memory: the plan needs" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()  # refused before anything was written or allocated


def test_the_billions_of_parameters_are_in_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    plan = make_plan(load_config("cpu-quickstart", [BIG_TINY]))
    billions = float(plan.model["parameters"].split()[0])
    assert billions > 8 and plan.host["learner (on the CPU)"] > 100 * (1 << 30)


@pytest.mark.parametrize("recipe", sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
def test_the_shipped_recipes_fit_their_hosts(recipe: str) -> None:
    assert memory_problems(load_config(recipe)) == []


def test_the_real_entry_point_prints_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("seed: " + "[" * 5000)
    p = subprocess.run([sys.executable, "-m", "agentgym.trainer.cli", "--config", str(tmp_path / "bad.yaml")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
