"""docs/getting-started.md runs as pasted: every code block, in a fresh directory.

A ```python block runs as a script; a ```bash block runs line by line (the commands are the
installed entry points). A block right under ``<!-- docs-test: skip: REASON -->`` is not run
(installs, runs of minutes; the site does not show the comment); a first line ``# needs: docker``
/ ``# needs: scale`` gives the block that pytest marker. tests/docs/test_pages.py runs the other
pages the same way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip:\s*(.+?)\s*-->\s*$")  # with its reason


def blocks(page: str) -> list[tuple[str, str, str]]:
    """(id, language, code) of every block that runs."""
    out = []
    text = (DOCS / page).read_text()
    for m in FENCE.finditer(text):
        lang, code = m.group(1), m.group(3)
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if SKIP.search(before) or lang not in ("python", "bash"):
            continue
        line = text[: m.start()].count("\n") + 1
        out.append((f"{page}:{line}", lang, code))
    return out


def _marks(code: str) -> list[pytest.MarkDecorator]:
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    need = re.match(r"#\s*needs:\s*(.+)", first)
    return [getattr(pytest.mark, n.strip()) for n in need.group(1).split(",")] if need else []


def _need_docker() -> None:
    """Skip without a Docker engine and the sandbox image (CI turns that skip into a failure)."""
    from agentgym.sandboxes import image
    from agentgym.sandboxes.docker_backend import docker_client

    try:
        image.wait_for_build()  # scripts/test.sh builds the image beside the first tests
        docker_client().images.get(image.image_tag())
    except Exception as e:
        pytest.skip(f"the docker sandbox is unavailable: {e}")


CASES = [pytest.param(lang, code, id=i, marks=_marks(code)) for i, lang, code in blocks("getting-started.md")]


@pytest.mark.slow
@pytest.mark.parametrize(("lang", "code"), CASES)
def test_getting_started_block_runs_as_pasted(lang: str, code: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if any(m.name == "docker" for m in request.node.iter_markers()):
        _need_docker()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if lang == "python":
        cmds = [[sys.executable, "-c", code]]
    else:
        cmds = [["bash", "-e", "-c", line] for line in code.splitlines() if line.strip() and not line.startswith("#")]
    for cmd in cmds:
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"{cmd[-1][:200]}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
        assert "Traceback" not in p.stderr, p.stderr


def test_every_block_is_run_or_marked() -> None:
    text = (DOCS / "getting-started.md").read_text()
    fences = FENCE.findall(text)
    assert len(fences) >= 8 and all(lang in ("python", "bash") and not info.strip() for lang, info, _ in fences)
    assert sum(1 for _ in blocks("getting-started.md")) >= 7
