"""Fixtures for the sandbox suites: one sandbox factory per backend.

Locally, a backend that cannot run here (no Docker engine, no bubblewrap) is skipped with
the reason. In CI (``CI`` set to a true value) the same situation FAILS the test: CI must
run the Docker and bubblewrap tests for real, never report them as skipped. The sandbox
image is built once per session if missing (cached by recipe hash, so usually a no-op).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from agentgym.errors import SandboxUnavailable
from agentgym.sandboxes import Sandbox, make_sandbox

SandboxFactory = Callable[[], Sandbox]

_MARKS = {"docker": pytest.mark.docker, "bwrap": pytest.mark.bwrap}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``backend`` over the module's ``SANDBOX_BACKENDS`` (default: all three)."""
    if "backend" in metafunc.fixturenames:
        names = getattr(metafunc.module, "SANDBOX_BACKENDS", ("docker", "bwrap", "unsafe-local"))
        params = [pytest.param(n, marks=[_MARKS[n]] if n in _MARKS else [], id=n) for n in names]
        metafunc.parametrize("backend", params, indirect=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip locally; fail in CI (a skipped Docker/bwrap test there is a silent gap)."""
    if in_ci():
        pytest.fail(f"CI must run this sandbox test but the backend is unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_pool() -> Iterator[object]:
    from agentgym.sandboxes import image
    from agentgym.sandboxes.docker_backend import SandboxPool, docker_client

    try:
        client = docker_client()
        try:
            client.images.get(image.image_tag())
        except Exception:
            image.build_image()  # first run on this machine: ~40-100 s, then cached
        pool = SandboxPool(size=2, client=client)
    except SandboxUnavailable as exc:
        unavailable(f"docker backend unavailable: {exc}")
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    from agentgym.sandboxes import image
    from agentgym.sandboxes.bwrap_backend import bwrap_available

    problem = bwrap_available()
    if problem:
        unavailable(f"bwrap backend unavailable: {problem}")
    if not image.rootfs_path().is_dir():
        try:
            image.build_rootfs()
        except SandboxUnavailable as exc:
            unavailable(f"bwrap rootfs missing and cannot be built here: {exc}")


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def factory(backend: str, request: pytest.FixtureRequest) -> Iterator[SandboxFactory]:
    """Callable returning a fresh sandbox of ``backend``; all are closed after the test."""
    made: list[Sandbox] = []
    if backend == "docker":
        pool = request.getfixturevalue("docker_pool")

        def make() -> Sandbox:
            made.append(pool.acquire())  # type: ignore[attr-defined]
            return made[-1]
    elif backend == "bwrap":
        request.getfixturevalue("bwrap_ready")

        def make() -> Sandbox:
            made.append(make_sandbox("bwrap"))
            return made[-1]
    else:

        def make() -> Sandbox:
            with pytest.warns(RuntimeWarning, match="UNSANDBOXED"):
                made.append(make_sandbox("unsafe-local"))
            return made[-1]

    yield make
    for sb in made:
        sb.close()


@pytest.fixture
def sb(factory: SandboxFactory) -> Sandbox:
    return factory()
