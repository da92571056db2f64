"""agentgym-eval for a newcomer: it says what it runs, runs a verifiable subset, prints the scores,
retries infrastructure faults instead of scoring them, and never passes a progress file off as a
submission."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentgym.errors import InfraError
from agentgym.leaderboards.cli import eval_main, leaderboard_main
from agentgym.leaderboards.evaluate import partial_path, run_suite
from agentgym.leaderboards.policies import OraclePolicy
from agentgym.leaderboards.suite import Suite, load_suite
from agentgym.leaderboards.verify import verify_submission

from .conftest import read_lines, write_lines


def test_the_suite_is_required_and_named_with_its_size(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        eval_main(["--policy", "oracle"])
    assert e.value.code == 2 and "--suite" in capsys.readouterr().err


def test_a_subset_runs_prints_its_scores_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub.jsonl.gz"
    assert eval_main(["--suite", "core", "--envs", "Math-v1", "--tasks", "2", "--policy", "oracle",
                      "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    core = load_suite("core")
    assert f"(a subset of {core.ref})" in captured.err and "1 envs, 2 tasks x 3 trials = 6 episodes" in captured.err
    assert "agentgym/Math-v1" in captured.out and "overall" in captured.out and "1.000" in captured.out
    report = verify_submission(out)
    assert report.ok, report.problems
    assert any("a subset of core@" in n for n in report.notes) and len(report.episodes) == 6
    assert leaderboard_main(["verify", str(out), "--no-progress"]) == 0


def test_a_forged_subset_is_re_derived_and_refused(tmp_path: Path) -> None:
    out = tmp_path / "sub.jsonl"
    suite = load_suite("core").subset(["agentgym/Math-v1"], 2)
    run_suite(suite, OraclePolicy(), out, name="o", policy_name="oracle", progress=False)
    from agentgym.leaderboards.suite import suite_hash

    lines = read_lines(out)
    forged = lines[0]["suite"]
    forged["envs"][0]["kwargs"]["max_turns"] = 50  # an easier budget than the full suite's ...
    forged["version"] = suite_hash(forged)  # ... with a version that matches the altered content
    report = verify_submission(write_lines(tmp_path / "forged.jsonl", lines))
    assert not report.ok and "a different suite version" in report.problems[0]


def test_a_progress_file_is_refused_with_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "calc.jsonl.gz"
    assert eval_main(["--suite", "calc", "--policy", "oracle", "--out", str(out), "--max-episodes", "3",
                      "--no-progress"]) == 0
    part = partial_path(out)
    assert part.exists() and not out.exists()
    assert leaderboard_main(["verify", str(part), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "progress file of an unfinished run of calc@" in err and "(3 episodes done)" in err
    assert "--envs" in err and "Traceback" not in err


class _ServerKiller(OraclePolicy):
    """The oracle, except that on its first action of the first ``kills`` episodes it kills the
    WebAPI server under the episode (SIGKILL): a real infrastructure fault mid-episode."""

    def __init__(self, kills: int) -> None:
        super().__init__()
        self.kills = kills

    def action(self, env: Any) -> np.ndarray:
        u = env.unwrapped
        if self.kills and len(u.trajectory.turns) == 0:
            self.kills -= 1
            os.kill(u.server.pid, signal.SIGKILL)
            u.server.proc.wait(10)
        return super().action(env)


WEBAPI = {"name": "webtiny", "trials": 1, "seed": 0, "sampling": {"temperature": 1.0},
          "envs": [{"id": "agentgym/WebAPI-v1", "kwargs": {"split": "all", "max_turns": 8},
                    "tasks": [{"task_id": "order_status-4"}, {"task_id": "cancel-1"}]}]}


@pytest.fixture
def web_suite(tmp_path: Path) -> Suite:
    from .conftest import write_suite

    return write_suite(tmp_path / "suites", WEBAPI)


def test_a_killed_server_is_retried_not_scored(tmp_path: Path, web_suite: Suite) -> None:
    out = tmp_path / "web.jsonl"
    path = run_suite(web_suite, _ServerKiller(kills=1), out, name="k", policy_name="oracle", workers=1,
                     progress=False, infra_retries=1)
    assert path is not None
    episodes = read_lines(path)[1:-1]
    assert [e["score"] for e in episodes] == [1.0, 1.0]  # the faulted one was played again, not scored 0
    assert all("infra_error" not in e["trajectory"]["meta"] for e in episodes)
    assert verify_submission(path, suite=web_suite).ok


def test_faults_that_outlast_the_retries_leave_no_submission(tmp_path: Path, web_suite: Suite) -> None:
    out = tmp_path / "web.jsonl"
    with pytest.raises(InfraError, match=r"1 episode\(s\) met infrastructure faults on each of 2 tries.*"
                                         r"run the same command again"):
        run_suite(web_suite, _ServerKiller(kills=2), out, name="k", policy_name="oracle", workers=1,
                  progress=False, infra_retries=1)
    assert not out.exists()
    lines = read_lines(partial_path(out))
    infra = [x for x in lines if x["kind"] == "infra"]
    assert len(infra) == 1 and "WebAPI server stopped answering" in infra[0]["error"]
    assert [x["task"] for x in lines if x["kind"] == "episode"] == [1]  # the other episode has its real score


def test_verify_refuses_an_episode_that_ended_in_an_infrastructure_fault(tmp_path: Path, web_suite: Suite) -> None:
    path = run_suite(web_suite, OraclePolicy(), tmp_path / "w.jsonl", name="o", policy_name="oracle", workers=1,
                     progress=False)
    assert path is not None
    lines = read_lines(path)
    lines[1]["trajectory"]["meta"]["infra_error"] = "SandboxLost: gone"
    report = verify_submission(write_lines(tmp_path / "t.jsonl", lines), suite=web_suite)
    assert not report.ok and any("ended in an infrastructure fault" in p for p in report.problems)
