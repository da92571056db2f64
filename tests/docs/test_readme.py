"""Every code block of README.md runs as pasted.

Python blocks are executed in a fresh interpreter. Shell blocks are run as they stand, in a
temporary folder, unless a command is one of the setup commands below, which install software
and are only checked (the script exists and parses, the extras named exist); a block of a
command this file does not know fails the test, so a new block gets a rule here. Heavy blocks are
marked ``slow``. The README also stays short, and its relative links resolve.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 300

# Commands that install software: checked, never run by the suite.
SETUP = ("bash scripts/", "pip install ")
# Blocks run as pasted but too heavy for a quick run, by their first line.
SLOW = ("agentgym-train --config cpu-quickstart",)


def _blocks() -> list[tuple[int, str, str]]:
    """(line number, language, code) of every fenced block."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", README.read_text(), re.S | re.M):
        out.append((README.read_text()[: m.start()].count("\n") + 1, m.group(1), m.group(2)))
    return out


def _commands(code: str) -> list[str]:
    """Shell commands of a block: continuation lines joined, comments and blank lines dropped."""
    joined = code.replace("\\\n", " ")
    return [c for c in (line.split(" #", 1)[0].strip() for line in joined.splitlines())
            if c and not c.startswith("#")]


def _params() -> list[Any]:
    params = []
    for line, lang, code in _blocks():
        marks = [pytest.mark.slow] if any(code.startswith(s) for s in SLOW) else []
        params.append(pytest.param(line, lang, code, id=f"line{line}-{lang or 'text'}", marks=marks))
    return params


def _env() -> dict[str, str]:
    """The venv's commands first on PATH, as after `source .venv/bin/activate`."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1"}


def _check_setup(command: str) -> None:
    words = command.split()
    if words[0] == "bash":
        script = ROOT / words[1]
        assert script.is_file(), f"{command}: {script} does not exist"
        run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert run.returncode == 0, f"{command}: {run.stderr}"
    else:  # pip install -e . / pip install 'agentgym-suite[extra,...]'
        import tomllib  # Python >= 3.11

        extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
        for group in re.findall(r"\[([\w,-]+)\]", command):
            unknown = set(group.split(",")) - extras
            assert not unknown, f"{command}: no such extra {sorted(unknown)} in pyproject.toml"
        assert words[:2] == ["pip", "install"] and (words[2:] == ["-e", "."] or len(words) > 2), command


@pytest.mark.parametrize(("line", "lang", "code"), _params())
def test_code_block_runs_as_pasted(line: int, lang: str, code: str, tmp_path: Path) -> None:
    where = f"README.md line {line}"
    if lang == "python":
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{where}:\n{run.stdout}\n{run.stderr}"
        return
    assert lang == "bash", f"{where}: a ```{lang} block; give it a rule in {Path(__file__).name}"
    commands = _commands(code)
    setup = [c for c in commands if c.startswith(SETUP)]
    if setup:
        assert setup == commands, f"{where}: mixes setup commands with others; split the block"
        for c in setup:
            _check_setup(c)
        return
    known = ("agentgym ", "agentgym-train", "agentgym-eval")
    assert all(c.startswith(known) for c in commands), f"{where}: unknown command; give it a rule here"
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, f"{where}:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) > 20
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
    assert "bash scripts/quickstart.sh" in text.split("\n## ", 1)[0]  # the two commands come first
    assert "bash scripts/test.sh" in text.split("\n## ", 1)[0]
