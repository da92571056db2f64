"""Every code block of docs/ runs as pasted (docs/getting-started.md: tests/test_docs.py).

A page's ```python and ```bash blocks run in order in one fresh directory: a python block as a
script, a bash block line by line (a line ending in ``\\`` continues on the next). A bash line
that ends in ``&`` starts a server in the background, as a reader would; its comment must say
what to ``wait for "..."`` (the line the server prints when it is ready), the next blocks run
once it has printed it, and it is stopped when the page is done. A first line ``# needs: docker``
(or ``scale``, ``harmony``) gives the page that pytest marker.

A block the test cannot run (an install, a run of many minutes, a GPU cluster) says so right
above its fence, in a comment the site does not show: ``<!-- docs-test: skip: the reason -->``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*docs-test:\s*skip:\s*(.*?)\s*-->\s*$")
WAIT = re.compile(r'wait for "([^"]+)"')
OWN_TEST = ("getting-started.md",)  # tests/test_docs.py runs it
GENERATED = ("training/config-reference.md",)  # tables, no code


@dataclass
class Block:
    where: str
    lang: str
    code: str
    skip: str | None  # the reason it is not run, or None

    @property
    def needs(self) -> list[str]:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        m = re.match(r"#\s*needs:\s*(.+)", first)
        return [n.strip() for n in m.group(1).split(",")] if m else []


def page_blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        line = text[: m.start()].count("\n") + 1
        out.append(Block(f"{page}:{line}", m.group(1), m.group(3), skip.group(1) if skip else None))
    return out


def pages() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")
                  if p.name not in OWN_TEST and str(p.relative_to(DOCS)) not in GENERATED)


def _runnable(page: str) -> list[Block]:
    return [b for b in page_blocks(page) if b.lang in ("python", "bash") and b.skip is None]


def _bash_lines(code: str) -> list[str]:
    lines, cur = [], ""
    for raw in code.splitlines():
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1] + " "
            continue
        line = (cur + raw).strip()
        cur = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _command_and_comment(line: str) -> tuple[str, str]:
    cut = len(line)
    for m in re.finditer(r"\s#", line):  # the first '#' outside quotes starts the comment
        head = line[: m.start()]
        if head.count('"') % 2 == 0 and head.count("'") % 2 == 0:
            cut = m.start()
            break
    return line[:cut].strip(), line[cut:]


def _marks(page: str) -> list[pytest.MarkDecorator]:
    return [getattr(pytest.mark, n) for n in sorted({n for b in _runnable(page) for n in b.needs})]


CASES = [pytest.param(p, id=p, marks=_marks(p)) for p in pages() if _runnable(p)]


def test_every_block_runs_or_says_why_not() -> None:
    skipped = [(b.where, b.skip) for p in pages() for b in page_blocks(p) if b.skip is not None]
    assert all(reason for _, reason in skipped), skipped  # a reason, always
    runs = [b for p in pages() for b in _runnable(p)]
    assert len(runs) >= 15 and len(skipped) <= 25, (len(runs), skipped)  # skips stay the exception
    for p in pages():
        for b in page_blocks(p):
            if b.lang == "bash" and b.skip is None:
                for line in _bash_lines(b.code):
                    cmd, comment = _command_and_comment(line)
                    assert not cmd.endswith("&") or WAIT.search(comment), (b.where, "a server line says what to "
                                                                           'wait for: # ... wait for "READY LINE"')


@pytest.mark.slow
@pytest.mark.parametrize("page", CASES)
def test_page_runs_as_pasted(page: str, tmp_path: Path) -> None:
    if any("docker" in b.needs for b in _runnable(page)):
        from tests.test_docs import _need_docker

        _need_docker()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for block in _runnable(page):
            if block.lang == "python":
                _run([sys.executable, "-c", block.code], block.where, tmp_path, env)
                continue
            for line in _bash_lines(block.code):
                cmd, comment = _command_and_comment(line)
                if cmd.endswith("&"):
                    ready = WAIT.search(comment)
                    assert ready, (block.where, line)
                    servers.append(_background(cmd[:-1], ready.group(1), block.where, tmp_path, env))
                else:
                    _run(["bash", "-e", "-c", cmd], block.where, tmp_path, env)
    finally:
        for s in servers:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGTERM)
                try:
                    s.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(s.pid, signal.SIGKILL)
                    s.wait()


def _run(cmd: list[str], where: str, cwd: Path, env: dict[str, str]) -> None:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"{where}: {cmd[-1][:300]}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, f"{where}\n{p.stderr[-3000:]}"


def _background(cmd: str, ready: str, where: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = cwd / f"server-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 300
    while ready not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"{where}: `{cmd}` ended before printing {ready!r}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{where}: `{cmd}` did not print {ready!r} in 300 s"
        time.sleep(0.2)
    return proc
