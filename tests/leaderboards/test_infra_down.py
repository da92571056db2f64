"""An environment whose infrastructure is down is never scored and never talks to the policy about it.

Each case runs in a fresh process with ``DOCKER_HOST`` pointing at no engine (or a WebAPI server
URL where nothing listens): the real "no Docker engine" path, not a stand-in for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

EVAL = "from agentgym.leaderboards.cli import eval_main; raise SystemExit(eval_main())"
NO_ENGINE = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/agentgym-test/docker.sock"}


def _run(args: list[str], cwd: Path, env: dict[str, str] = NO_ENGINE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def _one_line(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if "cannot be scored" in x]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_mathtool_without_docker_ends_python_episodes_as_faults_the_policy_never_reads(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import gymnasium as gym
        import agentgym
        from agentgym.oracles import run_oracle
        env = gym.make("agentgym/MathTool-v1")
        played = 0
        for seed in range(40):
            t = run_oracle(env, seed=seed)
            if t.turns[0].tool != "python":
                continue
            played += 1
            text = env.unwrapped.tokenizer.decode(t.tokens)
            assert t.meta["infra_error"].startswith("SandboxStartFailed: expected a running Docker engine")
            assert t.total_reward == 0.0 and t.truncated and not t.terminated
            assert "Docker" not in text and "nonexistent" not in text and "Sandbox" not in text, text[-400:]
        assert played >= 2, played
        print("OK", played)
    """)
    p = _run(["-c", code], tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("OK"), p.stdout + p.stderr


def test_validate_refuses_mathtool_and_codefix_without_docker(tmp_path: Path) -> None:
    for env_id in ("agentgym/MathTool-v1", "agentgym/CodeFix-v1"):
        p = _run(["-m", "agentgym.cli", "validate", env_id, "--max-tasks", "2", "--no-progress"], tmp_path)
        _one_line(p, f"{env_id} cannot be scored: its infrastructure is down", "expected a running Docker engine",
                  "start it")


def test_validate_refuses_webapi_whose_server_does_not_answer(tmp_path: Path) -> None:
    p = _run(["-m", "agentgym.cli", "validate", "agentgym/WebAPI-v1", "--env-arg", "server_url=http://127.0.0.1:9",
              "--max-tasks", "2", "--no-progress"], tmp_path, env=dict(os.environ))
    _one_line(p, "agentgym/WebAPI-v1 cannot be scored", "did not answer")


def test_eval_refuses_an_env_whose_infrastructure_is_down_before_playing_any_episode(tmp_path: Path) -> None:
    p = _run(["-c", EVAL, "--suite", "core", "--policy", "oracle", "--envs", "MathTool-v1",
              "--tasks", "2", "--no-progress", "--out", "x.jsonl.gz"], tmp_path)
    _one_line(p, "agentgym/MathTool-v1 cannot be scored", "expected a running Docker engine")
    assert not (tmp_path / "x.jsonl.gz").exists()
    partial = (tmp_path / "x.jsonl.gz.partial").read_text()
    assert '"kind":"episode"' not in partial and '"kind":"infra"' not in partial


def test_codefix_reset_without_docker_is_one_error_not_a_chain(tmp_path: Path) -> None:
    code = "import gymnasium as gym, agentgym\ngym.make('agentgym/CodeFix-v1').reset(seed=0)\n"
    p = _run(["-c", code], tmp_path)
    assert p.returncode == 1
    assert "During handling" not in p.stderr and "direct cause" not in p.stderr, p.stderr
    assert p.stderr.count("Traceback") == 1 and len(p.stderr.splitlines()) < 40, p.stderr
    assert p.stderr.splitlines()[-1].startswith("agentgym.errors.SandboxUnavailable: expected a running Docker engine")
