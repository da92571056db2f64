"""Fixed-task evaluation: Wilson intervals, PPO's own gain with its standard error, and the
closing report the CLI prints (untrained / warm start / after PPO, greedy and sampled)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentgym.trainer.evaluation import gain, report_lines, wilson


def test_wilson_interval_contains_the_rate_and_is_sensible_at_the_ends() -> None:
    lo, hi = wilson(0, 256)
    assert lo == 0.0 and 0 < hi < 0.02
    lo, hi = wilson(256, 256)
    assert 0.98 < lo < 1.0 and hi == 1.0
    lo, hi = wilson(128, 256)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 256), rel=0.02)
    assert wilson(0, 0) == (0.0, 1.0)


def test_gain_is_paired_on_the_same_tasks() -> None:
    before, after = {"outcomes": "0011" * 64}, {"outcomes": "1111" * 64}
    g = gain(before, after)
    assert g is not None and g["gain"] == pytest.approx(0.5)
    assert g["se"] == pytest.approx(math.sqrt(0.25 / 256))  # after has no variance
    assert g["z"] == pytest.approx(0.5 / g["se"])
    assert gain({"outcomes": "01"}, {"outcomes": "011"}) is None  # not the same tasks
    assert gain({"sampled_outcomes": "0"}, {"sampled_outcomes": "1"}, "sampled_")["gain"] == 1.0  # type: ignore[index]


def test_report_prints_three_stages_with_intervals_and_the_gain(tmp_path: Path) -> None:
    def ev(stage: str, step: int, outcomes: str, sampled: str | None) -> dict[str, object]:
        r: dict[str, object] = {"phase": "eval", "stage": stage, "step": step}
        for prefix, o in (("", outcomes), ("sampled_", sampled)):
            if o is None:
                continue
            k = o.count("1")
            lo, hi = wilson(k, len(o))
            r.update({prefix + "success": k / len(o), prefix + "success_lo": lo, prefix + "success_hi": hi,
                      prefix + "episodes": len(o), prefix + "outcomes": o,
                      prefix + "temperature": 0.0 if not prefix else 1.0})
        return r

    rows = [ev("init", 0, "0" * 64, "0" * 64), ev("warm_start", 0, "0" * 256, "01" * 128),
            ev("ppo", 10, "1" * 64, None), ev("ppo", 20, "1" * 256, "1" * 256),
            {"phase": "train", "step": 1, "kl_ref": 0.3, "health_alerts": [], "health_kl": 1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = report_lines(str(tmp_path))
    greedy, sampled = lines[0], lines[1]
    assert greedy.startswith("eval success, greedy: untrained 0.00 [0.00, 0.06] (n=64) -> warm start 0.00")
    assert "after PPO 1.00 [0.99, 1.00] (n=256)" in greedy  # the last ppo eval, not step 10's
    assert "PPO's own gain +1.000" in greedy
    assert sampled.startswith("eval success, T=1:") and "warm start 0.50" in sampled
    assert "PPO's own gain +0.500 ± 0.031 (16.0 SE)" in sampled
    assert lines[-1] == f"run dir: {tmp_path}"
