"""agentgym-train's command line: config errors exit 2 with a message, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from agentgym.trainer.cli import main, parse_args


def test_parse_args_forms() -> None:
    cfg, resume, printing, ov = parse_args(["--config", "cpu-quickstart", "ppo.lr=1e-3",
                                            "--rollout.temperature", "0.7", "--log.plots=false"])
    assert cfg == "cpu-quickstart" and resume is None and not printing
    assert ov == ["ppo.lr=1e-3", "rollout.temperature=0.7", "log.plots=false"]


def test_print_config_applies_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-config", "--config", "cpu-quickstart", "ppo.lr=3e-4"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["ppo"]["lr"] == 3e-4 and data["env"]["id"] == "agentgym/MathCalc-v1"


def test_help_lists_recipes_and_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "cpu-quickstart" in out and "gptoss-20b-8gpu-vllm" in out and "correction.mode" in out


@pytest.mark.parametrize("argv, needle", [
    (["ppo.lrr=1"], "did you mean 'ppo.lr'"),
    (["--config", "nope-recipe"], "not found"),
    (["--resume", "/nonexistent/run"], "config.yaml"),
    (["stray"], "unexpected argument"),
    (["--config", "cpu-quickstart", "--resume", "x"], "do not mix"),
])
def test_config_errors_exit_2_with_message(argv: list[str], needle: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_real_entry_point_exit_code_and_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "agentgym.trainer.cli", "ppo.clip_low=2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "config error" in proc.stderr and "Traceback" not in proc.stderr


def test_subcommands_delegate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["doctor", "--help"])
    assert e.value.code == 0 and "--engine" in capsys.readouterr().out


def test_the_old_serve_spelling_names_the_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model", "tiny"]) == 2  # the model server is `agentgym serve model` now
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`agentgym serve model`" in err and "Traceback" not in err


def test_no_arguments_print_help_and_start_nothing(tmp_path, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: agentgym-train") and "agentgym-train --config cpu-quickstart" in out
    assert list(tmp_path.iterdir()) == []  # no run dir: nothing ran


@pytest.mark.parametrize("override, needle", [
    ("env.id=agentgym/Maths-v0", "did you mean 'agentgym/Math-v1'?"),
    ("rollout.engine=vlm", "Did you mean 'vllm'?"),
    ("log.run_dir=/proc/forbidden", "cannot create files under /proc"),
    ("model.name=/nonexist/model", "no such directory"),
])
def test_a_run_that_would_fail_at_once_is_refused_before_it_starts(override: str, needle: str) -> None:
    import time

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "agentgym.trainer.cli", "--config", "cpu-quickstart", override],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and time.monotonic() - t0 < 60  # one line, before any model is built


@pytest.mark.parametrize("override, needle", [
    ("env.id=agentgym/Maths-v0", "did you mean 'agentgym/Math-v1'?"),
    ("rollout.engine=vlm", "unknown engine 'vlm'"),
    ("log.run_dir=/proc/forbidden", "cannot create files under /proc"),
])
def test_dry_run_is_not_consistent_for_a_run_that_would_fail(override: str, needle: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run", "--config", "cpu-quickstart", override]) == 2
    out = capsys.readouterr().out
    assert "verdict: NOT consistent" in out and needle in out
