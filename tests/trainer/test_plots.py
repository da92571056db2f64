"""Plots a person would read: labelled axes, one quantity per axis, legends off the data, the warm
start and RL on their own axes, nothing drawn for a metric that never changes, and the controls
plot of a run with controls. The files are checked for what they are, not for their pixels."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib", reason="plots come with the [train] extra")

from agentgym.trainer.plots import FIGURES, build_figures, write_controls_plot, write_plots  # noqa: E402


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def _eval(step: int, success: float, stage: str) -> dict[str, Any]:
    return {"phase": "eval", "step": step, "stage": stage, "sampled_success": success,
            "sampled_success_lo": success - 0.1, "sampled_success_hi": success + 0.1, "sampled_episodes": 64,
            "sampled_problems": 32, "success": success, "success_lo": success - 0.12, "success_hi": success + 0.12,
            "episodes": 32, "problems": 32}


def run_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [_eval(0, 0.0, "init")]
    rows += [{"phase": "sft", "step": s, "loss": 6.0 / s, "demo_token_p": 1 - 1 / (s + 1), "grad_norm": 1.0 / s}
             for s in range(1, 201)]
    rows += [{"phase": "sft", "step": s, "check_pass_at_1": 0.1 * s / 50, "check_pass_at_8": 0.3 * s / 50,
              "check_wellformed": 0.9} for s in (50, 100, 150, 200)]
    rows.append(_eval(0, 0.3, "warm_start"))
    rows += [{"phase": "train", "step": s, "reward_mean": 0.3 + 0.02 * s, "success": 0.3 + 0.02 * s,
              "kl_ref": 0.001 * s, "approx_kl": 0.002, "entropy": 1.0 - 0.01 * s, "grad_norm": 0.5 + 0.01 * s,
              "clip_frac": 0.05 + 0.001 * s, "mismatch_k3": 0.0, "mismatch_abs_dlogp_mean": 0.0,
              "mismatch_abs_dlogp_max": 0.0, "mismatch_w_mean": 1.0, "mismatch_ess": 1.0,
              "mismatch_capped_frac": 0.0, "engine_staleness": 0, "health_alerts": ["x"] if s == 7 else []}
             for s in range(1, 16)]
    rows += [_eval(5, 0.4, "ppo"), _eval(15, 0.5, "ppo")]
    return rows


def test_every_axis_is_labelled_holds_one_quantity_and_keeps_its_legend_off_the_data() -> None:
    import matplotlib.pyplot as plt

    figs = build_figures(run_rows())
    try:
        assert "mismatch" not in figs  # every mismatch series is a constant (the in-process engine)
        assert set(figs) == {"held_out", "reward", "kl", "entropy", "grad_norm", "clip_frac", "sft"}
        for name, fig in figs.items():
            axes = fig.get_axes()
            for ax in axes:
                assert ax.get_ylabel(), (name, "an axis without a y label")
                legend = ax.get_legend()
                assert legend is not None and legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1, name
            assert axes[-1].get_xlabel(), name
        assert figs["sft"].get_axes()[-1].get_xlabel() == "warm-start step"  # the warm start on its own axis
        assert figs["grad_norm"].get_axes()[-1].get_xlabel().startswith("PPO step")
        max_x = max(line.get_xdata().max() for line in figs["grad_norm"].get_axes()[0].get_lines())
        assert max_x == 15  # PPO's 15 steps, not the warm start's 200
        # the warm start's NLL (0-6) and the demos' probability (0-1) on axes of their own
        labels = [ax.get_ylabel() for ax in figs["sft"].get_axes()]
        assert labels[:2] == ["NLL (nats per policy token)", "probability"], labels
        # KL: the constant engine/learner k3 is left out, the two KLs that move have an axis each
        assert [ax.get_ylabel() for ax in figs["kl"].get_axes()] == ["KL to reference", "approx. KL old -> new"] \
            or [ax.get_ylabel() for ax in figs["kl"].get_axes()] == ["KL to reference"]
    finally:
        for fig in figs.values():
            plt.close(fig)


def test_write_plots_writes_readable_pngs_and_no_empty_ones(tmp_path: Path) -> None:
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for r in run_rows():
            f.write(json.dumps(r) + "\n")
    paths = write_plots(tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{n}.png" for n in FIGURES if n != "mismatch")
    for p in paths:
        w, h = png_size(p)
        assert 500 < w < 1400 and 200 < h < 1400, (p.name, w, h)
    (tmp_path / "metrics.jsonl").write_text("")
    assert write_plots(tmp_path) == []  # nothing logged: nothing drawn
    # a training reward stuck at 0 is a result: drawn; its constant diagnostics are not
    flat = [{"phase": "train", "step": s, "reward_mean": 0.0, "success": 0.0, "kl_ref": 0.0} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flat))
    assert [p.name for p in write_plots(tmp_path)] == ["reward.png"]


def test_the_controls_plot_puts_every_arm_beside_its_controls_with_intervals(tmp_path: Path) -> None:
    def final(success: list[int]) -> dict[str, Any]:
        n = len(success)
        m = sum(success) / n
        return {**_eval(40, m, "ppo"), "sampled_outcomes": "".join(map(str, success)), "sampled_samples": 1,
                "sampled_temperature": 1.0}

    mine = final([1, 1, 0, 1, 1, 0, 1, 1])
    warm = {**final([0, 1, 0, 1, 0, 0, 1, 0]), "stage": "warm_start", "step": 0}
    controls = {"placebo": final([0, 1, 0, 1, 0, 0, 1, 1]), "rft": final([1, 1, 0, 1, 0, 0, 1, 1]), "sft": None}
    from agentgym.trainer.stats import gain

    assert gain(controls["placebo"], mine, "sampled_")["gain"] == 0.25  # type: ignore[index]  # what it draws
    path = write_controls_plot(tmp_path, warm, mine, controls)
    assert path == tmp_path / "plots" / "controls.png"
    w, h = png_size(path)
    assert w > 800 and h > 250
    assert write_controls_plot(tmp_path / "alone", None, mine, {}) is not None  # no controls: the arm alone
