"""A clean submission verifies; every kind of tampering is rejected with a message naming the
episode (line, env, task, options, trial) and what differs."""

from __future__ import annotations

import copy
import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentgym.leaderboards.evaluate import run_suite
from agentgym.leaderboards.policies import ScriptedPolicy
from agentgym.leaderboards.suite import Suite
from agentgym.leaderboards.verify import summarize, verify_submission
from agentgym.oracles import get_oracle
from agentgym.trajectory import Trajectory

from .conftest import SMALL, read_lines, write_lines, write_suite

MATH0 = "agentgym/Math-v1 task 0 (index=0) trial 0"  # line 2
WEB0 = "agentgym/WebAPI-v1 task 0 (task_id=eval-order_status-16) trial 0"  # line 10


def _tampered(tmp_path: Path, src: Path, edit: Any) -> Path:
    lines = read_lines(src)
    edit(lines)
    return write_lines(tmp_path / "tampered.jsonl", lines)


def _rejected(path: Path, suite: Suite, *needles: str) -> list[str]:
    report = verify_submission(path, suite=suite, workers=2)
    assert not report.ok, "the tampered submission verified"
    text = "\n".join(report.problems)
    for n in needles:
        assert n in text, f"{n!r} not in the problems:\n{text}"
    return report.problems


def _index(lines: list[dict[str, Any]], label_env: str, task: int, trial: int) -> int:
    return next(i for i, x in enumerate(lines) if x.get("kind") == "episode" and x["env_id"] == label_env
                and x["task"] == task and x["trial"] == trial)


def test_clean_submission_verifies_and_scores_match(oracle_submission: Path, small_suite: Suite) -> None:
    report = verify_submission(oracle_submission, suite=small_suite, workers=2)
    assert report.ok, report.problems
    assert len(report.episodes) == 12
    footer = read_lines(oracle_submission)[-1]
    assert report.overall["mean"] == footer["overall"]["mean"] == 1.0
    assert report.scores["agentgym/Math-v1"]["pass_k"] == 1.0
    assert "VERIFIED" in report.format()


# ------------------------------------------------------------------ claims: scores, rewards, footer

def test_altered_episode_score(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[1]["score"] = 0.0
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 2: {MATH0}: score: recorded 0.0, replay gives 1.0")


def test_altered_turn_reward_and_components(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[1]["trajectory"]["turns"][-1]["reward"] = 0.5
        lines[2]["trajectory"]["turns"][-1]["components"]["outcome"] = 0.0
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 2: {MATH0}: turn 0 reward: recorded 0.5, replay gives 1.0",
              "line 3: agentgym/Math-v1 task 0 (index=0) trial 1: turn 0 components")


def test_altered_footer_scores_and_costs(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[-1]["scores"]["agentgym/WebAPI-v1"]["mean"] = 0.5
        lines[-1]["overall"]["ci95"] = [0.9, 1.0]
        lines[-1]["cost"]["output_tokens"] -= 100
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, "footer: agentgym/WebAPI-v1 mean: claimed 0.5, replay gives 1.0",
              "footer: overall ci95", "footer: cost output_tokens")


def test_altered_episode_cost(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[9]["cost"]["input_tokens"] = 10
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 10: {WEB0}: cost input_tokens: recorded 10")


# ------------------------------------------------------------------ the episode itself

def test_altered_action_changes_the_outcome(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    """A digit of the final answer changed in place: the replayed answer is wrong."""
    def edit(lines: list[dict[str, Any]]) -> None:
        tr = lines[1]["trajectory"]
        t = tr["turns"][0]
        i = next(j for j in range(t["action_start"], t["action_end"]) if 48 <= tr["tokens"][j] <= 57)
        tr["tokens"][i] = 48 + (tr["tokens"][i] - 48 + 1) % 10
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 2: {MATH0}: turn 0 reward: recorded 1.0, replay gives 0.0",
              f"line 2: {MATH0}: score: recorded 1.0, replay gives 0.0")


def test_altered_tool_call_changes_the_observation(tmp_path: Path, oracle_submission: Path,
                                                   small_suite: Suite) -> None:
    """The order id in WebAPI's get_order call changed: the real server answers about another order."""
    def edit(lines: list[dict[str, Any]]) -> None:
        tr = lines[9]["trajectory"]
        t = tr["turns"][0]
        i = next(j for j in range(t["action_start"], t["action_end"]) if 48 <= tr["tokens"][j] <= 57)
        tr["tokens"][i] = 48 + (tr["tokens"][i] - 48 + 1) % 10
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 10: {WEB0}: tokens differ first in turn 0's observation")


def test_altered_observation(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    """A tool result rewritten (same length): the server's real answer differs."""
    def edit(lines: list[dict[str, Any]]) -> None:
        tr = lines[9]["trajectory"]
        t = tr["turns"][0]
        i = next(j for j in range(t["action_end"], t["obs_end"]) if 48 <= tr["tokens"][j] <= 57)
        tr["tokens"][i] = 48 + (tr["tokens"][i] - 48 + 1) % 10
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 10: {WEB0}: tokens differ first in turn 0's observation",
              "the action or the observation was altered")


def test_altered_prompt_and_policy_mask(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[1]["trajectory"]["tokens"][5] ^= 1
        tr = lines[9]["trajectory"]
        tr["policy_mask"][tr["turns"][0]["action_end"]] = 1  # an env token claimed as sampled
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 2: {MATH0}: tokens differ first in the prompt (token 5)",
              f"line 10: {WEB0}: policy_mask differs at turn 0's observation")
    report = verify_submission(p, suite=small_suite, workers=2)
    assert report.notes and report.notes[0].startswith("1 of 12 episodes differ from the replay already in their "
                                                       "prompt")
    assert "note: 1 of 12 episodes" in report.format()


def test_dropped_turn_and_broken_structure(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        tr = lines[9]["trajectory"]  # drop the last turn and its tokens: an unfinished episode
        last = tr["turns"].pop()
        for key in ("tokens", "policy_mask", "logprobs"):
            del tr[key][last["action_start"]:]
        tr["terminated"] = False
        lines[10]["trajectory"]["turns"][0]["obs_end"] += 5  # turns no longer tile the stream
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 10: {WEB0}: the record stops after", "(an unfinished episode)",
              "line 11: agentgym/WebAPI-v1 task 0 (task_id=eval-order_status-16) trial 1: malformed trajectory")


# ------------------------------------------------------------------ seeds, episodes, trials

def test_wrong_seed(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[1]["seed"] = lines[1]["trajectory"]["seed"] = 12345
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 2: {MATH0}: wrong seed 12345; the suite's seed for this episode is")


def test_missing_episode(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        del lines[_index(lines, "agentgym/Math-v1", 2, 1)]
        lines[-1]["episodes"] -= 1
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, "missing episode: agentgym/Math-v1 task 2 (index=2) trial 1")


def test_duplicated_episode(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines.insert(5, copy.deepcopy(lines[1]))
        lines[5]["cost"]["wall_s"] += 1.0  # not byte for byte: the same episode all the same
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, f"line 6: {MATH0}: duplicated episode (also on line 2)",
              "footer: claims 12 episodes, the file has 13")

    def exact(lines: list[dict[str, Any]]) -> None:
        lines.insert(5, copy.deepcopy(lines[1]))
    _rejected(_tampered(tmp_path, oracle_submission, exact), small_suite, "line 6 repeats line 2 byte for byte")


def test_other_env_version(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[1]["env_id"] = lines[1]["trajectory"]["env_id"] = "agentgym/Math-v2"
        lines[2]["trajectory"]["env_id"] = "agentgym/MathCalc-v1"
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, "line 2: env 'agentgym/Math-v2' is not in suite small@",
              "line 3: agentgym/Math-v1 task 0 (index=0) trial 1: the trajectory was recorded on "
              "'agentgym/MathCalc-v1', the suite runs 'agentgym/Math-v1' (a different environment version)")


def test_other_suite_version(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    from agentgym.leaderboards.suite import suite_hash

    def edited_without_version(lines: list[dict[str, Any]]) -> None:
        lines[0]["suite"]["trials"] = 1
    p = _tampered(tmp_path, oracle_submission, edited_without_version)
    _rejected(p, small_suite, "line 1 (header): the suite was altered after the run", "hashes to")

    def other_suite(lines: list[dict[str, Any]]) -> None:
        lines[0]["suite"]["trials"] = 1
        lines[0]["suite"]["version"] = suite_hash(lines[0]["suite"])
    p = _tampered(tmp_path, oracle_submission, other_suite)
    _rejected(p, small_suite, "the submission was made for suite small@", f"is {small_suite.ref}: a different "
              "suite version")


def test_declared_sampling_and_tokenizer(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        lines[0]["submission"]["describe"]["temperature"] = 0.5
    _rejected(_tampered(tmp_path, oracle_submission, edit), small_suite,
              "sampled at temperature 0.5, the suite requires 1.0 (or 0: greedy decoding, scored on one trial)")

    def tok(lines: list[dict[str, Any]]) -> None:
        lines[0]["submission"]["tokenizer"]["vocab_size"] = 1000
    _rejected(_tampered(tmp_path, oracle_submission, tok), small_suite, "not the tokenizer the episodes were sampled")


class CoinPolicy(ScriptedPolicy):
    """Right on even seeds, wrong on odd ones: trials of a task differ, as sampled ones do."""

    name = "coin"

    def action(self, env: Any) -> np.ndarray:
        u = env.unwrapped
        if u.trajectory.seed % 2 == 0:
            return get_oracle(u.env_id)(env)
        return np.asarray(u.codec.final_ids("no idea"), dtype=np.int64)


def test_cherry_picked_trials(tmp_path: Path) -> None:
    """Run 4 trials, keep the best 2 per task. Relabelled as trials 0 and 1 (scores, footer and
    suite all made consistent), the seeds give it away; kept with their own labels, the trial
    numbers do."""
    math_only = {**SMALL, "name": "pick", "envs": SMALL["envs"][:1]}
    suite2 = write_suite(tmp_path / "s2", math_only)
    suite4 = write_suite(tmp_path / "s4", {**math_only, "trials": 4})
    path4 = run_suite(suite4, CoinPolicy(), tmp_path / "four.jsonl", name="coin", policy_name="coin", workers=2,
                      progress=False)
    assert path4 is not None
    lines = read_lines(path4)
    by_task: dict[int, list[dict[str, Any]]] = {}
    for ep in lines[1:-1]:
        by_task.setdefault(ep["task"], []).append(ep)
    assert any(0 < sum(e["score"] for e in eps) < 4 for eps in by_task.values()), "no task has mixed trials"

    def forge(relabel: bool) -> Path:
        kept = []
        for eps in by_task.values():
            best = sorted(eps, key=lambda e: (-e["score"], e["trial"]))[:2]
            for new_trial, ep in enumerate(sorted(best, key=lambda e: e["trial"])):
                ep = copy.deepcopy(ep)
                if relabel:
                    ep["trial"] = new_trial
                kept.append(ep)
        specs = {s.key: s for s in suite2.episodes()}
        pairs = [(specs[(e["env_id"], e["task"], min(e["trial"], 1))], Trajectory.from_dict(e["trajectory"]))
                 for e in kept]
        per_env, overall = summarize(suite2, pairs)
        header = {**lines[0], "suite": suite2.content}
        footer = {**lines[-1], "episodes": len(kept), "scores": per_env, "overall": overall}
        return write_lines(tmp_path / f"forged-{relabel}.jsonl", [header, *kept, footer])

    problems = _rejected(forge(relabel=True), suite2, "is the seed of trial", "(cherry-picked)")
    assert any("is the seed of trial 2" in p or "is the seed of trial 3" in p for p in problems), problems
    _rejected(forge(relabel=False), suite2, "the suite declares 2 trials (0..1): an episode from more trials than "
              "declared (cherry-picked)")


# ------------------------------------------------------------------ the file

def test_truncated_files(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    text = oracle_submission.read_text()
    mid = tmp_path / "mid.jsonl"
    mid.write_text(text[: len(text) // 2])
    _rejected(mid, small_suite, "the last line has no newline", "not valid JSON", "the footer is missing")
    lines = text.splitlines(keepends=True)
    boundary = tmp_path / "boundary.jsonl"
    boundary.write_text("".join(lines[:-3]))
    _rejected(boundary, small_suite, "the footer is missing after line 11: the file is truncated",
              "missing episode: agentgym/WebAPI-v1 task 1 (task_id=eval-cancel-24) trial 0")
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(text.encode())[:-200])
    _rejected(gz, small_suite, "cannot be read to its end")


def test_schema_violations(tmp_path: Path, oracle_submission: Path, small_suite: Suite) -> None:
    def edit(lines: list[dict[str, Any]]) -> None:
        del lines[1]["cost"]
        lines[2]["trajectory"]["policy_mask"][3] = 2
        lines[3]["trajectory"]["turns"][0]["reward"] = "1.0"
        lines[4]["task"] = -1
    p = _tampered(tmp_path, oracle_submission, edit)
    _rejected(p, small_suite, "line 2: schema: (top level): 'cost' is a required property",
              "line 3: schema: trajectory/policy_mask/3: 2 is not 0 or 1",
              "line 4: schema: trajectory/turns/0/reward: '1.0' is not of type 'number'",
              "line 5: schema: task: -1 is less than the minimum of 0")

    def header(lines: list[dict[str, Any]]) -> None:
        del lines[0]["submission"]["tokenizer"]
    _rejected(_tampered(tmp_path, oracle_submission, header), small_suite,
              "line 1 (header): schema: submission: 'tokenizer' is a required property")


def test_not_a_submission(tmp_path: Path, small_suite: Suite) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text('{"kind": "episode"}\n')
    _rejected(p, small_suite, "the header is missing", "the footer is missing")


@pytest.mark.parametrize("mode", ["rejected", "clipped"])
def test_rejected_and_clipped_actions_replay(tmp_path: Path, mode: str) -> None:
    """Actions the env did not store whole (out of vocabulary; longer than max_action_tokens)
    replay to the same episode."""

    class Odd(ScriptedPolicy):
        name = "odd"

        def action(self, env: Any) -> np.ndarray:
            u = env.unwrapped
            if not u.trajectory.turns:
                if mode == "rejected":
                    return np.asarray([u.tokenizer.vocab_size + 5], dtype=np.int64)
                return np.asarray(u.codec.final_ids("x" * 400), dtype=np.int64)
            return get_oracle(u.env_id)(env)

    suite = write_suite(tmp_path / "s", {**SMALL, "name": "odd", "trials": 1, "envs": SMALL["envs"][:1]})
    path = run_suite(suite, Odd(), tmp_path / "odd.jsonl", name="odd", policy_name="odd", workers=1,
                     progress=False)
    assert path is not None
    first = read_lines(path)[1]["trajectory"]["turns"][0]
    assert first["error"].startswith("out_of_vocab" if mode == "rejected" else "action_too_long")
    report = verify_submission(path, suite=suite, workers=1)
    assert report.ok, report.problems
