"""The wheel: built without setuptools warnings, with its data, and usable as installed.

Builds the wheel from the tracked files with the project's own build backend (setuptools), in
a copy of the tree, installs it into a folder of its own and runs it from there: the installed
package (not this checkout) answers ``agentgym --version``, and ``leaderboard build`` leaves the
packaged board as shipped, writing to ``./leaderboard`` instead.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"the build backend needs setuptools>=77 (the [dev] extra), found {setuptools.__version__}")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path_factory.mktemp("src")
    for f in files:
        if f.startswith(("tests/", "bench/")) or not (ROOT / f).is_file():
            continue
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_bytes((ROOT / f).read_bytes())
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_wheel({str(out)!r}))"],
                       cwd=src, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out / p.stdout.strip().splitlines()[-1], p.stdout + p.stderr


def test_the_build_has_no_package_would_be_ignored_warnings(wheel: tuple[Path, str]) -> None:
    _, log = wheel
    assert "Package would be ignored" not in log, log[log.find("Package would be ignored") - 500:][:1500]


def test_the_wheel_carries_its_data_and_one_namespace(wheel: tuple[Path, str]) -> None:
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for f in ("agentgym/leaderboards/LEADERBOARD.md", "agentgym/leaderboards/suites/core.yaml",
              "agentgym/leaderboards/site/board.js", "agentgym/trainer/recipes/cpu-quickstart.yaml",
              "agentgym/environments/codefix/data/tasks.jsonl.gz", "agentgym/py.typed"):
        assert f in names, f
    # agentgym_verifiers: the verifiers plugin shim (verifiers finds plugins by top-level module name)
    assert {n.split("/")[0] for n in names if not n.startswith("agentgym_suite-")} == {"agentgym", "agentgym_verifiers"}


def test_an_installed_copy_runs_and_never_overwrites_its_packaged_board(wheel: tuple[Path, str],
                                                                       tmp_path: Path) -> None:
    path, _ = wheel
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(target), str(path)], check=True, capture_output=True, timeout=300)
    packaged = target / "agentgym" / "leaderboards" / "LEADERBOARD.md"
    before = packaged.read_bytes()
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    work = tmp_path / "work"
    work.mkdir()
    code = ("import sys, agentgym; from agentgym.cli import main; print(agentgym.__file__); "
            "sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "--version"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith(str(target)), p.stdout + p.stderr  # the installed copy
    p = subprocess.run([sys.executable, "-c", code, "leaderboard", "build", "--no-progress"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert packaged.read_bytes() == before
    assert (work / "leaderboard" / "LEADERBOARD.md").exists() and f"markdown: {work / 'leaderboard'}" in p.stdout
