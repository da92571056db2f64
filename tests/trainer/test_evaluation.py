"""Held-out evaluation: intervals, pass@k, per-problem paired differences with their
standard errors, the well-formed tool loop, and the closing report the CLI prints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentgym.scores import wilson
from agentgym.trainer.evaluation import episode_wellformed, eval_record, report_lines
from agentgym.trainer.stats import gain, pass_at_k, per_problem


def test_the_trainer_and_the_leaderboards_share_one_success_rule_and_interval() -> None:
    import agentgym.scores
    from agentgym.leaderboards import stats
    from agentgym.trainer.metrics import episode_success

    assert stats.wilson is agentgym.scores.wilson and stats.Z95 == agentgym.scores.Z95
    ep = {x: SimpleNamespace(turns=[SimpleNamespace(components={"outcome": x})]) for x in (0.0, 0.6, 1.0)}
    assert [episode_success(ep[x]) for x in (0.0, 0.6, 1.0)] == [False, False, True]  # partial credit: no
    # the same three outcomes on a leaderboard task: the mean counts the 0.6, pass^1 does not
    summary = stats.env_summary({0: [0.0, 0.6, 1.0]}, k=1)
    assert summary["mean"] == pytest.approx(1.6 / 3) and summary["pass_k"] == pytest.approx(1 / 3)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0 and pass_at_k(8, 8, 1) == 1.0


def _episode(ok: bool, *, tool: bool = True, error: str | None = None, terminated: bool = True) -> Any:
    return SimpleNamespace(traj=_traj(ok, tool=tool, error=error, terminated=terminated), lost=False)


def _traj(ok: bool, *, tool: bool = True, error: str | None = None, terminated: bool = True) -> Any:
    turns = [SimpleNamespace(tool="calculator" if tool else None, error=error, components={}),
             SimpleNamespace(tool=None, error=None, components={"outcome": 1.0 if ok else 0.0})]
    return SimpleNamespace(turns=turns, terminated=terminated, truncated=not terminated, total_reward=float(ok),
                           num_policy_tokens=10, tokens=[0] * 20, meta={})


def test_eval_record_with_samples_per_problem() -> None:
    # 3 problems x 2 samples, problem-major: solved 2/2, 1/2, 0/2
    trajs = [_episode(True), _episode(True), _episode(True), _episode(False), _episode(False, tool=False),
             _episode(False)]
    r = eval_record(trajs, 1.0, "sampled_", samples=2, needs_tool=True, task_ids=["a", "b", "c"])
    assert r["sampled_success"] == pytest.approx(0.5) and r["sampled_problems"] == 3
    assert r["sampled_outcomes"] == "111000" and r["sampled_samples"] == 2
    assert r["sampled_pass_at_1"] == pytest.approx(0.5) and r["sampled_pass_at_2"] == pytest.approx(2 / 3)
    assert r["sampled_wellformed"] == pytest.approx(5 / 6)  # one episode answered without the tool
    assert r["sampled_success_lo"] < 0.5 < r["sampled_success_hi"]
    assert per_problem("111000", 2) == [1.0, 0.5, 0.0]
    assert per_problem("111000", 2, any_of=True) == [1.0, 1.0, 0.0]


def test_a_lost_episode_keeps_its_place_and_pairs_nothing() -> None:
    # two identical policies, each losing a different episode to the infrastructure: gain 0
    outcomes = [True, False, True, True, False, True, False, False]
    lost_a, lost_b = 1, 5
    def run(lost: int) -> list[SimpleNamespace]:
        trajs = [_episode(ok) for ok in outcomes]
        trajs[lost].lost = True  # Episode.lost: its infra_error is set
        return trajs
    a = eval_record(run(lost_a), 1.0, task_ids=[str(i) for i in range(8)])
    b = eval_record(run(lost_b), 1.0, task_ids=[str(i) for i in range(8)])
    assert a["outcomes"] == "1-110100" and a["episodes"] == 7 and a["problems"] == 8
    g = gain(a, b)
    assert g is not None and g["gain"] == 0.0 and g["problems"] == 6
    # with samples: a problem keeps the samples that were scored; all lost -> no rate
    assert per_problem("1-0--", 1) == [1.0, None, 0.0, None, None]
    assert per_problem("1-00--", 2) == [1.0, 0.0, None]
    r = eval_record([_episode(True), _episode(False), *run(0)[:2]], 1.0, samples=2)
    assert r["outcomes"] == "10-0" and r["pass_at_2"] == pytest.approx(1.0)  # problem 2 has one sample: no pass@2


def test_wellformed_means_the_loop_not_the_answer() -> None:
    assert episode_wellformed(_traj(False), needs_tool=True)  # a wrong number, well formed
    assert not episode_wellformed(_traj(True, tool=False), needs_tool=True)
    assert episode_wellformed(_traj(True, tool=False), needs_tool=False)
    assert not episode_wellformed(_traj(False, error="malformed"), needs_tool=True)
    assert not episode_wellformed(_traj(False, terminated=False), needs_tool=True)  # cut by a budget


def test_gain_is_paired_problem_by_problem() -> None:
    before, after = {"outcomes": "0011" * 64}, {"outcomes": "1111" * 64}
    g = gain(before, after)
    assert g is not None and g["gain"] == pytest.approx(0.5) and g["problems"] == 256
    assert g["se"] == pytest.approx(math.sqrt(0.25 * 256 / 255 / 256))  # sd of the per-problem differences
    assert g["z"] == pytest.approx(0.5 / g["se"])
    assert gain({"outcomes": "01"}, {"outcomes": "011"}) is None  # not the same problems
    # correlated outcomes: the paired SE is far below the unpaired one
    a = {"outcomes": "0" * 100 + "1" * 100}
    b = {"outcomes": "0" * 90 + "1" * 110}
    g = gain(a, b)
    assert g is not None and g["se"] < g["se_unpaired"] / 2
    # several samples per problem compare per-problem rates; different problem lists do not compare
    w = {"sampled_outcomes": "0011", "sampled_samples": 2, "sampled_problems_hash": "x"}
    e = {"sampled_outcomes": "1111", "sampled_samples": 2, "sampled_problems_hash": "x"}
    assert gain(w, e, "sampled_")["gain"] == pytest.approx(0.5)  # type: ignore[index]
    assert gain(w, {**e, "sampled_problems_hash": "y"}, "sampled_") is None
    # pass@k: a problem counts once any of its k samples solved it (here 0/2 -> 2/2 and 1/2 -> 2/2)
    w4 = {"sampled_outcomes": "0001", "sampled_samples": 2}
    assert gain(w4, e, "sampled_")["gain"] == pytest.approx(0.75)  # type: ignore[index]
    assert gain(w4, e, "sampled_", pass_at_k=True)["gain"] == pytest.approx(0.5)  # type: ignore[index]
    assert gain(w4, {"sampled_outcomes": "11", "sampled_samples": 1}, "sampled_", pass_at_k=True) is None  # k differs


def _ev(stage: str, step: int, greedy: str, sampled: str | None, samples: int = 1) -> dict[str, object]:
    r: dict[str, object] = {"phase": "eval", "stage": stage, "step": step}
    for prefix, o, k in (("", greedy, 1), ("sampled_", sampled, samples)):
        if o is None:
            continue
        p = o.count("1") / len(o)
        lo, hi = wilson(p, len(o))
        r.update({prefix + "success": p, prefix + "success_lo": lo, prefix + "success_hi": hi,
                  prefix + "episodes": len(o), prefix + "problems": len(o) // k, prefix + "samples": k,
                  prefix + "outcomes": o, prefix + "temperature": 0.0 if not prefix else 1.0,
                  prefix + "pass_at_1": p, **({prefix + f"pass_at_{k}": min(1.0, 2 * p)} if k > 1 else {})})
    return r


def test_report_prints_primary_then_secondary_held_out_and_the_warm_start(tmp_path: Path) -> None:
    rows = [{"phase": "held_out", "step": 0, "eval_problems": 128, "check_problems": 0, "how": "no splits"},
            _ev("init", 0, "0" * 64, "0" * 64),
            _ev("warm_start", 0, "0" * 128, "01" * 128, samples=2),
            {"phase": "warm_start", "step": 0, "teacher": "oracle", "steps": 350, "wellformed": 0.93,
             "min_wellformed": 0.5, "failed": False, "stop_reason": "held-out pass@8 0.55 >= 0.5"},
            _ev("ppo", 10, "1" * 64, None), _ev("ppo", 20, "1" * 128, "1" * 256, samples=2),
            {"phase": "train", "step": 1, "kl_ref": 0.3, "health_alerts": [], "health_kl": 1, "held_out_overlap": 0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = report_lines(str(tmp_path))
    primary, secondary = lines[0], lines[1]
    assert primary.startswith("held-out success, T=1 (primary; 128 problems x 2 samples): untrained 0.000")
    assert "warm start 0.500" in primary and "after PPO 1.000" in primary
    assert "gain over the warm start +0.500 ± 0.000 paired (inf SE)" in primary and "pass@2 1.000 -> 1.000" in primary
    assert secondary.startswith("held-out success, greedy (secondary; 128 problems): untrained 0.000")
    assert "after PPO 1.000 [0.97, 1.00]" in secondary  # the final evaluation, not step 10's
    assert lines[2] == "held out: 128 distinct evaluation problems (no splits); none drawn in training"
    assert lines[3].startswith("warm start: teacher oracle, 350 steps (held-out pass@8 0.55 >= 0.5), "
                               "well-formed tool loop on 0.93")
    assert lines[4] == "health: KL to reference at step(s) 1 in 1 steps"
    assert lines[-1] == f"run dir: {tmp_path}"


def test_report_says_loudly_when_the_warm_start_failed_or_plants_a_defect(tmp_path: Path) -> None:
    rows = [{"phase": "warm_start", "step": 0, "teacher": "defect-sign-flipper", "steps": 560,
             "wellformed": 0.1, "min_wellformed": 0.5, "failed": True}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (line, _) = report_lines(str(tmp_path))
    assert line.startswith("WARM START FAILED: teacher defect-sign-flipper")
    assert "PLANTS A DEFECT" in line


def test_the_update_is_named_for_what_it_computed() -> None:
    """PPO only when the ratio moved; the closing line reports the ratio's range, the clipped
    share, the negative-advantage share and the correction weights."""
    from agentgym.trainer.evaluation import ratio_moved, update_line

    still = [{"phase": "train", "ratio_min": 1.0, "ratio_max": 1.0, "clip_frac": 0.0, "adv_neg_frac": 0.0,
              "mismatch_w_min": 1.0, "mismatch_w_max": 1.0, "mismatch_capped_frac": 0.0}] * 3
    moved = [*still, {"phase": "train", "ratio_min": 0.7, "ratio_max": 1.31, "clip_frac": 0.12,
                      "adv_neg_frac": 0.4, "mismatch_w_min": 0.9, "mismatch_w_max": 2.0,
                      "mismatch_capped_frac": 0.01}]
    assert not ratio_moved(still) and ratio_moved(moved)
    line = update_line(still)
    assert line is not None and "not PPO: the ratio stayed exactly 1" in line
    assert "ratio range [1.0000, 1.0000], clipped 0.00% of tokens, negative advantage on 0.0% of tokens" in line
    line = update_line(moved)
    assert line is not None and line.startswith("update (4 steps; PPO: the ratio moved)")
    assert "ratio range [0.7000, 1.3100], clipped 3.00% of tokens, negative advantage on 10.0% of tokens" in line
    assert "correction weights [0.9000, 2.0000], 0.2% capped" in line
    assert update_line([{"phase": "train", "loss": 1.0}]) is None  # an imitation arm: no ratio
