"""The ``agentgym`` command: one line and an exit code for every mistake, never a traceback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import IO

import pytest


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _one_line_error(p: subprocess.CompletedProcess[str], rc: int, *needles: str) -> None:
    assert p.returncode == rc, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)


def test_version_and_list_show_what_is_installed() -> None:
    import agentgym

    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.startswith(f"agentgym {agentgym.__version__}")
    p = run_cli("list")
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.startswith("  ")}
    import gymnasium as gym

    assert set(rows) == {k for k in gym.registry if k.startswith("agentgym/")}  # every id, adapters and imports too
    for line in rows.values():  # a description and what it needs, on one line
        what, _, needs = line.split(None, 1)[1].partition("; needs: ")
        assert len(what) > 20 and needs, line
    assert "Docker" in rows["agentgym/CodeFix-v1"] and "[interop]" in rows["agentgym/SkyRL-v0"]
    assert "[scale]" in rows["agentgym/Remote-v0"] and "nothing more" in rows["agentgym/MathCalc-v1"]


@pytest.mark.parametrize(("args", "needles"), [
    (["demo", "Math-v1"], ["did you mean 'agentgym/Math-v1'?"]),
    (["demo", "--episodes", "0"], ["--episodes: expected a positive integer"]),
    (["demo", "agentgym/Math-v1", "--env-arg", "famlies=[arithmetic]"], ["did you mean 'families'?"]),
    (["validate", "agentgym/Math-v1", "--max-tasks", "0"], ["--max-tasks: expected a positive integer"]),
    (["validate", "agentgym/Math-v1", "--env-arg", "famlies=[arithmetic]", "--max-tasks", "2"],
     ["MathEnv got unknown keyword argument(s) 'famlies' (did you mean 'families'?)"]),
    (["validate", "agentgym/Math-v1", "--oracle", "nosuch:fn"], ["cannot import module 'nosuch'"]),
    (["validate", "agentgym/Maths-v0"], ["did you mean 'agentgym/Math-v1'?"]),
    (["serve", "env", "agentgym/Math-v1", "--env-kwarg", 'famlies=["arithmetic"]'], ["did you mean 'families'?"]),
    (["serve", "env", "agentgym/Math-v1", "--tokenizer", "/nonexist"], ["'/nonexist': no such directory"]),
    (["serve", "env", "agentgym/Maths-v0"], ["did you mean 'agentgym/Math-v1'?"]),
    # the old spelling (before `serve model` existed) names the new one
    (["serve", "agentgym/Math-v1"], ["`agentgym serve ENV_ID` is now `agentgym serve env ENV_ID`"]),
    (["serve", "--port", "8700", "agentgym/Math-v1"], ["is now `agentgym serve env ENV_ID`"]),
])
def test_usage_mistakes_exit_2_with_one_line(args: list[str], needles: list[str]) -> None:
    _one_line_error(run_cli(*args), 2, *needles)


def test_demo_passes_env_arguments_to_every_env() -> None:
    p = run_cli("demo", "agentgym/Math-v1", "--episodes", "3", "--env-arg", "families=[arithmetic]",
                "--env-arg", "split=eval")
    assert p.returncode == 0, p.stderr
    assert "with {'families': ['arithmetic'], 'split': 'eval'}" in p.stderr
    assert p.stdout.startswith("agentgym/Math-v1") and "mean_reward=1.000" in p.stdout, p.stdout


def test_serve_help_lists_both_servers_and_imports_no_server() -> None:
    code = ("import sys\nfrom agentgym.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'uvicorn', 'agentgym.trainer') if m in sys.modules])")
    for args, needles in ((["serve", "-h"], ["env", "model"]), (["serve", "model", "-h"], ["--model", "--tokenizer"]),
                          (["serve", "env", "-h"], ["ENV_ID", "--env-kwarg"])):
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and all(n in p.stdout for n in needles), (args, p.stdout, p.stderr)
        assert p.stdout.strip().endswith("[]"), p.stdout  # parsing imports no server and no torch


def test_serve_model_without_the_train_extra_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['torch'] = None; from agentgym.cli import main; "  # torch cannot be imported
            "sys.exit(main(['serve', 'model', '--model', 'tiny']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    _one_line_error(p, 2, "agentgym serve model", "pip install 'agentgym-suite[train]'")


def test_serve_on_a_busy_port_says_so() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = run_cli("serve", "env", "agentgym/Math-v1", "--port", str(port))
    _one_line_error(p, 2, f"port {port} on 127.0.0.1 is in use", "--port 0")


ENTRY = {"agentgym": "agentgym.cli:main", "agentgym-eval": "agentgym.leaderboards.cli:eval_main",
         "agentgym-train": "agentgym.trainer.cli:main"}


def _launch(prog: str, *args: str, cwd: str) -> subprocess.Popen[str]:
    module, fn = ENTRY[prog].split(":")
    code = f"import sys; from {module} import {fn}; sys.exit({fn}())"
    env = {**os.environ, "AGENTGYM_PROGRESS_EVERY_S": "0.05"}  # a progress line per finished episode
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env)


def _wait_for(stream: IO[str], ready: str) -> None:
    """Read lines until one matches ``ready`` (a regular expression): the command is at work."""
    seen = []
    while not seen or not re.search(ready, seen[-1]):
        line = stream.readline()
        assert line, f"the command ended before printing {ready!r}: {seen[-5:]}"
        seen.append(line)


# (command, its arguments, the stream and line that say it is at work, its Ctrl-C line, seconds to stop)
@pytest.mark.parametrize(("prog", "args", "ready", "message", "within_s"), [
    ("agentgym", ["serve", "env", "agentgym/Math-v1", "--port", "0"], ("stdout", "AGENTGYM_SERVE_READY"), None, 20),
    ("agentgym", ["demo", "agentgym/MathCalc-v1", "--episodes", "100000000"], ("stderr", "agentgym demo: "),
     "agentgym demo: interrupted", 20),
    # an episode has finished (the counter counts it as it happens) and more are queued
    ("agentgym-eval", ["--suite", "core", "--policy", "do-nothing", "--out", "x.jsonl.gz"],
     ("stdout", r" [1-9][0-9]*/198 "), "run the same command again to resume", 20),
    ("agentgym", ["validate", "agentgym/Math-v1", "agentgym/WebAPI-v1"], ("stdout", r"oracle [1-9][0-9]*/"),
     "agentgym validate: interrupted", 10),
    ("agentgym-train", ["doctor", "--episodes", "16", "--max-turns", "8", "--max-new-tokens", "96"],
     ("stderr", "agentgym-train doctor:"), "agentgym-train: interrupted", 20),
])
def test_one_ctrl_c_stops_a_long_running_command(tmp_path, prog: str, args: list[str], ready: tuple[str, str],  # type: ignore[no-untyped-def]
                                                 message: str | None, within_s: float) -> None:
    p = _launch(prog, *args, cwd=str(tmp_path))
    try:
        assert p.stdout is not None and p.stderr is not None
        _wait_for(p.stdout if ready[0] == "stdout" else p.stderr, ready[1])
        assert p.poll() is None, p.stderr.read()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        assert time.monotonic() - t0 < within_s
        err = p.stderr.read()
        assert "Traceback" not in err, err
        if message is not None:
            assert rc == 130 and message in err, (rc, err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_ctrl_c_stops_the_openenv_export_server_without_a_traceback() -> None:
    pytest.importorskip("openenv.core", reason="pip install 'agentgym-suite[interop]'")
    p = subprocess.Popen([sys.executable, "-m", "agentgym.environments.interop.openenv_export", "agentgym/Math-v1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stderr is not None
        _wait_for(p.stdout, "url=http://")
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=30)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, (rc, err)
    assert err.strip().splitlines()[-1].endswith("interrupted"), err


# An environments-only install: a finder in front of sys.meta_path refuses torch, as a machine
# without the [train] extra would.
NO_TORCH = """import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoTorch())
"""


@pytest.mark.parametrize("call", [
    "from agentgym.trainer.cli import main; sys.exit(main(['ppo.steps=1']))",
    "from agentgym.trainer.cli import main; sys.exit(main(['doctor']))",
    "from agentgym.leaderboards.cli import eval_main; "
    "sys.exit(eval_main(['--suite', 'calc', '--policy', 'hf', '--policy-arg', 'model=random']))",
])
def test_without_the_train_extra_commands_print_the_install_hint(tmp_path, call: str) -> None:  # type: ignore[no-untyped-def]
    p = subprocess.run([sys.executable, "-c", NO_TORCH + call], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    _one_line_error(p, 2, "this needs torch, which is not installed", "pip install 'agentgym-suite[train]'",
                    "pip install -e '.[train]'")


def test_eval_with_the_hf_policy_needs_a_model_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = subprocess.run([sys.executable, "-c", "import sys; from agentgym.leaderboards.cli import eval_main; "
                        "sys.exit(eval_main(['--suite', 'calc', '--policy', 'hf']))"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    _one_line_error(p, 2, "--policy hf needs the model to evaluate", "model=random")
    assert not list(tmp_path.iterdir())  # refused before any file is written


def test_long_commands_print_their_plan_and_an_estimate_before_the_work(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = run_cli("validate", "agentgym/MathCalc-v1", "agentgym/Math-v1")
    assert p.returncode == 0, p.stderr
    err = p.stderr.splitlines()
    assert err[0].startswith("agentgym validate: 2 env configurations") and "--max-tasks N" in err[0], err[0]
    plan = next(x for x in err if x.startswith("validate agentgym/MathCalc-v1: 6 tasks x 3 policies"))
    assert re.search(r"one episode took \d+\.\d\d s here, so about \d+\.\d min", plan), plan
    assert "validate agentgym/MathCalc-v1: oracle 0/6" in p.stdout  # the progress, on stdout
    env = {**os.environ, "AGENTGYM_PROGRESS_EVERY_S": "0.05"}
    p = subprocess.run([sys.executable, "-c", "import sys; from agentgym.leaderboards.cli import eval_main; "
                        "sys.exit(eval_main(['--suite', 'calc', '--policy', 'oracle', '--workers', '1']))"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "90 episodes" in p.stderr and "--tasks N run a smaller verifiable subset" in p.stderr, p.stderr
    counts = [int(m.group(1)) for m in re.finditer(r" (\d+)/90 \(", p.stdout)]
    assert counts[0] == 0 and counts[-1] == 90 and len(set(counts)) > 3, p.stdout  # counted as they finish
    assert re.search(r" \d+/90 \(\d+ s, ~\d+ s left\)", p.stdout), p.stdout


@pytest.mark.parametrize("argv", [
    ["agentgym", "--help"], ["agentgym", "demo", "--help"], ["agentgym", "sandbox", "--help"],
    ["agentgym", "validate", "--help"], ["agentgym", "leaderboard", "--help"], ["agentgym", "serve", "--help"],
    ["agentgym", "serve", "env", "--help"], ["agentgym", "serve", "model", "--help"], ["agentgym-eval", "--help"],
    ["agentgym-train", "--help"], ["agentgym-train"], ["agentgym-train", "doctor", "--help"],
])
def test_help_is_plain_text_without_rest_markup(argv: list[str]) -> None:
    module, fn = ENTRY[argv[0]].split(":")
    code = f"import sys; from {module} import {fn}; sys.exit({fn}())"
    p = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and len(p.stdout) > 200, (argv, p.stdout, p.stderr)
    for markup in ("``", ":func:", ":class:", ":mod:", ":meth:"):
        assert markup not in p.stdout, (argv, markup, [x for x in p.stdout.splitlines() if markup in x][:3])
