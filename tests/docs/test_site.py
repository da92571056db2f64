"""The documentation site: it builds with ``mkdocs build --strict`` (a broken link, anchor or nav
entry fails), its config reference is what trainer/config.py says, and the built site works in
a real headless chromium: the home page renders, the nav and search work, and no page links to a
page or anchor that does not exist."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("AGENTGYM_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def _build(site: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mkdocs", reason="the docs need the [dev] extra (mkdocs, mkdocs-material)")
    pytest.importorskip("material", reason="the docs need the [dev] extra (mkdocs, mkdocs-material)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    build = _build(out)
    assert build.returncode == 0, build.stdout + build.stderr
    return out


@pytest.mark.docs
def test_the_site_builds_strict(site: Path) -> None:
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert "index.html" in pages and "results.html" in pages and "training/config-reference.html" in pages
    # every Markdown page under docs/ became a page (none left out of the nav: the strict build
    # already fails on that, this guards the configuration itself)
    for md in (ROOT / "docs").rglob("*.md"):
        assert md.relative_to(ROOT / "docs").with_suffix(".html").as_posix() in pages, md


@pytest.mark.docs
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strictness is real: the same build with one link to a missing page fails."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shutil.copytree(ROOT / "bench", tmp_path / "bench", ignore=shutil.ignore_patterns("*.py"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = docs / "install.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    pytest.importorskip("mkdocs", reason="the docs need the [dev] extra (mkdocs, mkdocs-material)")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "no-such-page.md" in run.stdout + run.stderr


def test_the_config_reference_is_current() -> None:
    """docs/training/config-reference.md is generated from trainer/config.py; regenerate it with
    `python scripts/gen_config_docs.py` when a config field changes."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_config_reference_lists_every_key() -> None:
    from agentgym.trainer.config import config_help

    page = (ROOT / "docs" / "training" / "config-reference.md").read_text()
    keys = [line.strip().split("=", 1)[0] for line in config_help().splitlines() if not line.startswith("      ")]
    assert len(keys) > 50
    missing = [k for k in keys if f"| `{k}` |" not in page]
    assert not missing, missing


def test_the_config_reference_rows_have_four_cells_on_github_too() -> None:
    """GitHub splits a table row at every unescaped pipe, inside code spans too (mkdocs does not),
    so a `str | None` type would push the row's description into a fifth cell there."""
    page = (ROOT / "docs" / "training" / "config-reference.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) > 50
    wide = [row for row in rows if len(re.split(r"(?<!\\)\|", row.strip().strip("|"))) != 4]
    assert not wide, wide[:3]


# ------------------------------------------------------------------ the built site in chromium

@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site over HTTP on loopback: search runs in a web worker, which a file:// page cannot start."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@functools.cache
def _ids(url: str) -> frozenset[str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        html = r.read().decode("utf-8")
    return frozenset(re.findall(r'\bid="([^"]+)"', html))


@pytest.mark.docs
@pytest.mark.browser
def test_the_site_in_headless_chromium(site: Path, served: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 20)

    # The home page renders: title, heading, the nav with every section.
    browser.get(served)
    assert browser.title.startswith("agentgym")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "agentgym"
    nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").get_attribute("textContent")
    for section in ("Install", "Environments", "Environment API", "Training", "Scale-out", "Leaderboards",
                    "Internals", "Results"):
        assert section in nav, section
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors

    # The nav works: a link in it opens its page.
    browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary a[href='install.html']").click()
    wait.until(ec.url_contains("install.html"))
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "Install"

    # Search loads its index and finds a page.
    box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    box.click()
    box.send_keys("sandbox threat model")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "li.md-search-result__item"))
    hits = " ".join(e.get_attribute("textContent") for e in browser.find_elements(
        By.CSS_SELECTOR, "li.md-search-result__item"))
    assert "Threat model" in hits, hits[:500]
    box.send_keys(Keys.ESCAPE)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "docs-search.png"))

    # No page links to a page or an anchor that does not exist.
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    broken: list[str] = []
    checked = 0
    unrendered: list[str] = []
    for page in pages:
        browser.get(served + page)
        # Every fenced block of the page's source renders as a code block, none as prose with
        # its fence showing (an info string the renderer does not read did that once).
        source = ROOT / "docs" / Path(page).with_suffix(".md")
        if source.exists():
            fences = len(re.findall(r"^```", source.read_text(), re.M)) // 2
            blocks = browser.execute_script("return document.querySelectorAll('article pre > code').length")
            raw = browser.execute_script("return Array.from(document.querySelectorAll('article p, article li'))"
                                         ".filter(e => e.textContent.includes('```')).length")
            if blocks < fences or raw:
                unrendered.append(f"{page}: {fences} fenced blocks in the source, {blocks} code blocks rendered, "
                                  f"{raw} paragraphs showing a fence")
        hrefs = browser.execute_script("return Array.from(document.querySelectorAll('a[href]'), a => a.href)")
        for href in set(hrefs):
            if urlparse(href).netloc != urlparse(served).netloc:
                continue  # only internal links
            target, anchor = urldefrag(href)
            try:
                ids = _ids(target)
            except OSError as e:
                broken.append(f"{page} -> {href}: {e}")
                continue
            if anchor and anchor not in ids:
                broken.append(f"{page} -> {href}: no element with id {anchor!r}")
            checked += 1
    assert checked > 300, checked
    assert not broken, "\n".join(broken)
    assert not unrendered, "\n".join(unrendered)
