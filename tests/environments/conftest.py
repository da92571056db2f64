"""Fixtures for the environment tests: a real Docker sandbox pool shared by the session.

Locally, no Docker engine means the ``docker`` tests skip with the reason. In CI (``CI``
set to a true value) the same situation FAILS: CodeFix and MathTool tests must run for real there.
The sandbox image is built once if it is missing (cached by recipe hash).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym.errors import SandboxUnavailable


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def docker_pool() -> Iterator[Any]:
    from agentgym.sandboxes import image
    from agentgym.sandboxes.docker_backend import SandboxPool, docker_client

    try:
        client = docker_client()
        try:
            client.images.get(image.image_tag())
        except Exception:
            image.build_image()  # first run on this machine, then cached by recipe hash
        pool = SandboxPool(size=2, client=client)
    except SandboxUnavailable as exc:
        if _in_ci():
            pytest.fail(f"CI must run the Docker environment tests but Docker is unavailable: {exc}")
        pytest.skip(f"docker backend unavailable: {exc}")
    yield pool
    pool.close()
