"""The submissions in the repository verify and the committed board is what they give.

This is how a submission pull request is checked in CI: the new file under
``leaderboards/submissions/SUITE/`` is replayed like every other one, and ``LEADERBOARD.md`` must
be the output of ``agentgym leaderboard build`` (``--check``). When an environment's behaviour
changes, regenerate the baselines: ``python -m agentgym.leaderboards.baselines``.
"""

from __future__ import annotations

import pytest

from agentgym.leaderboards.board import DEFAULT_ROOT, build_board
from agentgym.leaderboards.suite import list_suites


@pytest.mark.docker
@pytest.mark.slow
def test_committed_submissions_verify_and_the_board_is_current(docker_ready: None) -> None:
    subs = sorted((DEFAULT_ROOT / "submissions").rglob("*.jsonl*"))
    assert subs, "no committed submissions: the board would be empty"
    assert {p.parent.name for p in subs} <= set(list_suites())
    result = build_board(DEFAULT_ROOT, check=True, workers=4)
    assert result.ok, "\n".join(result.problems) + "\nregenerate with: python -m agentgym.leaderboards.baselines"
    names = {e.row()["name"] for e in result.entries}
    assert {"oracle", "do-nothing"} <= names
