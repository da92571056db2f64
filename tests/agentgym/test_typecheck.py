"""The whole package type-checks (STYLE.md #8): mypy over ``agentgym`` as it installs.

The top-level folders map into the ``agentgym`` namespace (pyproject's package-dir:
``trainer/`` is ``agentgym.trainer``), which mypy cannot follow through the editable install's
import hook. So the test lays the installed tree out with symlinks (``agentgym/trainer`` ->
``trainer/``, ...) and checks ``-p agentgym`` there: core, environments, sandboxes, trainer and
leaderboards, with the project's own mypy settings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPED = ("environments", "sandboxes", "trainer", "leaderboards")  # top-level folder -> agentgym.<name>


def installed_layout(dest: Path) -> Path:
    """``dest/agentgym``: the package as it installs, made of symlinks into the checkout."""
    pkg = dest / "agentgym"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "agentgym").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name in MAPPED:
        (pkg / name).symlink_to(ROOT / name)
    return pkg


@pytest.mark.slow
def test_the_package_passes_mypy(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    installed_layout(tmp_path / "tree")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), "-p", "agentgym"],
                       cwd=tmp_path / "tree", capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_layout_holds_every_mapped_folder(tmp_path: Path) -> None:
    pkg = installed_layout(tmp_path)
    assert (pkg / "trainer" / "train.py").is_file() and (pkg / "environments" / "codefix" / "sandbox_judge.py").is_file()
    assert (pkg / "registration.py").resolve() == ROOT / "agentgym" / "registration.py"
