"""``agentgym leaderboard build``: the Markdown board, ``--check``, and the web page driven in a real
headless chromium (table, sorting, transcripts, hostile text shown as text), with a screenshot."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agentgym.leaderboards.board import build_board
from agentgym.leaderboards.suite import Suite

from .conftest import make_submission, read_lines, write_lines

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><b id="xss">bold</b> </script>'
ARTIFACTS = Path(os.environ.get("AGENTGYM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


@pytest.fixture(scope="module")
def board_root(tmp_path_factory: pytest.TempPathFactory, small_suite: Suite, oracle_submission: Path) -> Path:
    root = tmp_path_factory.mktemp("board")
    (root / "suites").mkdir()
    shutil.copy(_suite_path(small_suite), root / "suites" / "small.yaml")
    subs = root / "submissions" / "small"
    subs.mkdir(parents=True)
    shutil.copy(oracle_submission, subs / "oracle.jsonl")
    make_submission(small_suite, "do-nothing", subs / "do-nothing.jsonl.gz")
    make_submission(small_suite, "just-answer", subs / "hostile.jsonl", answer=HOSTILE)
    return root


def _suite_path(suite: Suite) -> Path:
    import yaml

    p = Path(tempfile.mkdtemp()) / f"{suite.name}.yaml"
    p.write_text(yaml.safe_dump(suite.content, sort_keys=False))
    return p


def test_build_writes_a_ranked_markdown_board(board_root: Path) -> None:
    result = build_board(board_root, workers=2)
    assert result.ok, result.problems
    md = (board_root / "LEADERBOARD.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert rows[0].startswith("| 1 | oracle | oracle *(checked)* | 1.000 [")  # the verifier re-ran the oracle
    assert "| 1.000 *(1 trial)* |" in rows[0]  # a scripted entry: one trial per task is scored
    assert len(rows) == 3
    assert "| Math-v1 | WebAPI-v1 | pass^2 | Tokens in/ep | Tokens out/ep |" in md
    assert (board_root / "board" / "site" / "index.html").exists()
    assert len(list((board_root / "board" / "site" / "transcripts").glob("*.js"))) == 3
    assert build_board(board_root, check=True, workers=2).ok  # what was written is what --check expects

    (board_root / "LEADERBOARD.md").write_text(md.replace("| 1 | oracle", "| 1 | 0racle"))
    stale = build_board(board_root, check=True, workers=2)
    assert not stale.ok and "is not what the submissions give" in stale.problems[0]
    (board_root / "LEADERBOARD.md").write_text(md)


def test_a_submission_that_does_not_verify_is_left_off(board_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(board_root, root)
    bad = root / "submissions" / "small" / "oracle.jsonl"
    lines = read_lines(bad)
    lines[3]["score"] = 0.0
    write_lines(bad, lines)
    result = build_board(root, workers=2)
    assert not result.ok
    assert "submissions/small/oracle.jsonl does not verify and is left off the board" in result.problems[0]
    assert "| oracle |" not in (root / "LEADERBOARD.md").read_text()


# ------------------------------------------------------------------ the web page in chromium (tests/conftest.py's browser)

@pytest.mark.browser
def test_page_in_headless_chromium(board_root: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    result = build_board(board_root, workers=2)
    assert result.ok and result.site is not None
    page = (result.site / "index.html").resolve().as_uri()
    assert page.startswith("file://")
    browser.get(page)
    wait = WebDriverWait(browser, 20)

    def names() -> list[str]:
        return [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#board tbody tr td:nth-child(2)")]

    def header(label: str) -> Any:
        return next(th for th in browser.find_elements(By.CSS_SELECTOR, "#board th") if th.text.startswith(label))

    # The table: three verified submissions, ranked, with intervals and cost columns.
    assert names() == ["oracle", "do-nothing", "just-answer"]  # by score, ties by name
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#board th")]
    assert heads[:4] == ["#", "Submission", "Model", "Overall"] and "Tokens out/ep" in heads and "pass^2" in heads
    first = browser.find_element(By.CSS_SELECTOR, "#board tbody tr td:nth-child(4)").text
    assert first.startswith("1.000") and "[" in first
    # Scripted entries the verifier re-ran are checked, and score one trial per task.
    model = browser.find_element(By.CSS_SELECTOR, "#board tbody tr td:nth-child(3)")
    assert model.text.split() == ["oracle", "(checked)"] and "prov checked" in model.get_attribute("innerHTML")
    assert "(1 trial)" in browser.find_element(By.CSS_SELECTOR, "#board tbody tr td:nth-child(7)").text

    # Sorting: Overall is sorted descending; a click makes it ascending; Submission sorts by name.
    assert header("Overall").get_attribute("aria-sort") == "descending"
    header("Overall").click()
    assert header("Overall").get_attribute("aria-sort") == "ascending"
    assert names()[-1] == "oracle"
    header("Submission").click()
    assert names() == sorted(names())
    header("Tokens out/ep").click()
    outs = [float(td.get_attribute("data-value")) for td in
            browser.find_elements(By.CSS_SELECTOR, "#board tbody tr td:nth-child(9)")]
    assert outs == sorted(outs, reverse=True)

    # A submission's episodes, filtered to WebAPI; then one transcript.
    browser.find_element(By.CSS_SELECTOR, "button.open[data-id='small-oracle']").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#episodes tbody tr")))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 12
    Select(browser.find_element(By.ID, "env-filter")).select_by_value("agentgym/WebAPI-v1")
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    assert len(rows) == 4
    rows[0].click()
    transcript = wait.until(ec.visibility_of_element_located((By.ID, "transcript")))
    text = transcript.text
    for needle in ("Transcript: agentgym/WebAPI-v1 task 0 trial 0", "tool call: functions.get_order",
                   '"order_id": 16', "tool result from functions.get_order", "HTTP 200", "final answer",
                   "ANSWER: placed, ordered 2025-06-15", "reward components: only the outcome is paid (sparse)",
                   "outcome", "reported", "paid", "score"):
        assert needle in text, f"{needle!r} not in the transcript:\n{text[:2000]}"
    assert browser.find_elements(By.CSS_SELECTOR, "#transcript .msg.tool-call")
    assert browser.find_elements(By.CSS_SELECTOR, "#transcript .msg.tool-result")
    # The long system/developer prompt is folded, also in the env's first episode.
    folded = browser.find_element(By.CSS_SELECTOR, "#transcript details")
    assert folded.get_attribute("open") is None and "system and developer messages" in folded.text
    assert "Store policy" not in text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "leaderboard-transcript.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    # A model's hostile final answer is shown as text, never run as HTML.
    browser.execute_script("window.agentgymBoard.openSubmission('small-hostile')")
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#episodes tbody tr")))
    browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")[0].click()
    final = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#transcript .msg.final pre")))
    assert final.text == HOSTILE
    assert not browser.find_elements(By.ID, "xss") and browser.title == "agentgym leaderboard"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(ARTIFACTS / "leaderboard-table.png"))
