"""Unit tests that need no backend: paths, recipe hash, mirror discovery, errors, runner core."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from agentgym.errors import ConfigError, SandboxUnavailable
from agentgym.sandboxes import BACKENDS, runner
from agentgym.sandboxes.base import check_relpath
from agentgym.sandboxes.image import DOCKERFILE, debian_mirror, image_tag, recipe_hash


def test_check_relpath() -> None:
    assert check_relpath("a/./b/../c.txt") == "a/c.txt"
    for bad in ("/abs", "..", "../x", "a/../../x", "", "a\x00b"):
        with pytest.raises(ConfigError):
            check_relpath(bad)


def test_recipe_hash_is_stable_and_in_the_tag() -> None:
    h = recipe_hash()
    assert len(h) == 12 and int(h, 16) >= 0 and h == recipe_hash()
    assert image_tag() == f"agentgym-sandbox:{h}"


def test_dockerfile_matches_the_recipe() -> None:
    assert "python3-pytest" in DOCKERFILE and "runner.py /opt/agentgym/runner.py" in DOCKERFILE
    assert "USER sandbox" in DOCKERFILE


def test_debian_mirror_from_deb822_and_one_line_sources(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGYM_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert debian_mirror(tmp_path) == "http://old.example/debian"
    assert debian_mirror(tmp_path / "missing") == "http://deb.debian.org/debian"
    monkeypatch.setenv("AGENTGYM_DEBIAN_MIRROR", "http://override/debian")
    assert debian_mirror(tmp_path) == "http://override/debian"


def test_unreachable_docker_engine_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.sandboxes.docker_backend import docker_client

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match="start it"):
        docker_client()


def test_bwrap_with_a_missing_rootfs_says_how_to_fix(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    from agentgym.sandboxes import bwrap_backend

    if bwrap_backend.bwrap_available():
        pytest.skip("bwrap not usable here")
    monkeypatch.setattr(bwrap_backend, "rootfs_path", lambda: tmp_path / "nope")
    with pytest.raises(SandboxUnavailable, match="agentgym sandbox build"):
        bwrap_backend.BwrapSandbox()


def test_backends_are_the_documented_three() -> None:
    assert set(BACKENDS) == {"docker", "bwrap", "unsafe-local"}


def test_runner_core_in_process(tmp_path: Path) -> None:
    wd = str(tmp_path)
    w = runner.handle({"op": "write", "files": {"d/f.txt": base64.b64encode(b"hi").decode()}}, wd)
    assert w == {"ok": True}
    assert runner.handle({"op": "list", "path": "."}, wd)["files"] == ["d/f.txt"]
    bad = runner.handle({"op": "read", "path": "../../etc/passwd"}, wd)
    assert bad["ok"] is False and bad["kind"] == "PermissionError"
    assert runner.handle({"op": "nope"}, wd)["ok"] is False
    r = runner.execute({"argv": ["sh", "-c", "cat d/f.txt; ulimit -n"], "timeout": 5,
                        "rlimits": {"nofile": 64}}, wd)
    assert base64.b64decode(r["stdout"]) == b"hi64\n" and r["exit_code"] == 0


def test_runner_frames_round_trip() -> None:
    msg = runner.encode_message({"op": "ping"})
    assert runner.decode_frame_length(msg[:4]) == len(msg) - 4
    with pytest.raises(ValueError):
        runner.decode_frame_length((runner.MAX_MESSAGE + 1).to_bytes(4, "big"))


def test_import_is_light() -> None:
    import subprocess
    import sys

    code = "import sys, agentgym.sandboxes; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}).stdout
    assert out.strip() == "False"


def test_no_silent_fallback_when_docker_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.sandboxes import docker_backend, make_sandbox

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(docker_backend, "_default", None)
    with pytest.raises(SandboxUnavailable):
        make_sandbox()  # the default backend is docker; it must not quietly run locally
    with pytest.raises(SandboxUnavailable):
        make_sandbox("docker", pool_size=0)


def test_public_surface_is_pinned() -> None:
    import agentgym.sandboxes as pkg
    from agentgym.sandboxes import base

    assert sorted(pkg.__all__) == ["BACKENDS", "ExecResult", "Sandbox", "SandboxPool",
                                   "SandboxState", "make_sandbox"]
    assert sorted(base.__all__) == ["DEFAULT_OUTPUT_LIMIT", "DEFAULT_TIMEOUT", "ExecResult",
                                    "Sandbox", "SandboxState", "check_options", "check_relpath"]
    assert [f for f in base.ExecResult.__dataclass_fields__] == [
        "stdout", "stderr", "exit_code", "timed_out", "duration_s",
        "stdout_truncated", "stderr_truncated"]


def test_unknown_backend_options_are_named_with_the_closest_one() -> None:
    from agentgym.errors import ConfigError
    from agentgym.sandboxes import make_sandbox

    with pytest.raises(ConfigError, match=r"'mem_limit' for the bwrap sandbox; did you mean 'mem_limit_bytes'"):
        make_sandbox("bwrap", mem_limit=1 << 28)
    with pytest.raises(ConfigError, match=r"'timeout' for the unsafe-local sandbox"):
        make_sandbox("unsafe-local", timeout=3)


def test_a_backend_waits_for_a_build_in_progress(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`agentgym sandbox build` holds the build lock: a backend that finds the rootfs missing
    waits for that build (wait_for_build) and then finds its result, instead of failing
    (scripts/test.sh builds the image beside the first tests)."""
    import subprocess
    import sys
    import time

    from agentgym.sandboxes import image

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    runner_file = image.rootfs_path() / image.RUNNER_PATH.lstrip("/")
    # a stand-in build: holds the lock for 1.5 s, then the rootfs appears
    build = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from agentgym.sandboxes import image\n"
        "with image.build_lock():\n"
        "    print('locked', flush=True); time.sleep(1.5)\n"
        f"    p = Path({str(runner_file)!r}); p.parent.mkdir(parents=True); p.write_text('')\n")],
        env={**os.environ}, stdout=subprocess.PIPE, text=True)
    assert build.stdout is not None and build.stdout.readline() == "locked\n"
    said: list[str] = []
    t0 = time.monotonic()
    image.wait_for_build(log=said.append)
    assert time.monotonic() - t0 > 0.5 and runner_file.is_file() and "in progress" in said[0]
    assert build.wait(timeout=30) == 0
    t0 = time.monotonic()
    image.wait_for_build(log=said.append)  # no build running: at once, silently
    assert time.monotonic() - t0 < 0.5 and len(said) == 1
    # a build that never ends: a clear error after the timeout, not a hang
    hold = subprocess.Popen([sys.executable, "-c", (
        "import time; from agentgym.sandboxes import image\n"
        "with image.build_lock():\n    print('locked', flush=True); time.sleep(60)\n")],
        env={**os.environ}, stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout is not None and hold.stdout.readline() == "locked\n"
        with pytest.raises(SandboxUnavailable, match="build in progress to finish within 1 s"):
            image.wait_for_build(timeout=1, log=lambda _: None)
    finally:
        hold.kill()
        hold.wait()
