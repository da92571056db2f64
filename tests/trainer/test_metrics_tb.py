"""TensorBoard's steps after ``--resume`` are those of ``metrics.jsonl``: increasing, each once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.trainer.metrics import MetricsLogger, read_metrics, truncate_metrics

pytest.importorskip("tensorboard", reason="TensorBoard comes with the [train] extra")


def tb_steps(run_dir: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_steps_stay_monotonic_across_a_resume(tmp_path: Path) -> None:
    log = MetricsLogger(tmp_path, tensorboard=True)
    for step in (1, 2, 3):
        log.log("sft", step, {"loss": 1.0 / step})
    for step in (1, 2):
        log.log("train", step, {"reward_mean": 0.1 * step, "note": "text is not a scalar"})
    log.close()
    # killed after train step 2; the checkpoint covered the warm start and train step 1 (4 records)
    truncate_metrics(tmp_path, 4)
    log = MetricsLogger(tmp_path, tensorboard=True)  # the resumed run
    for step in (2, 3):
        log.log("train", step, {"reward_mean": 0.2 * step})
    log.close()
    rows = read_metrics(tmp_path)
    assert [(r["phase"], r["step"]) for r in rows] == [("sft", 1), ("sft", 2), ("sft", 3), ("train", 1),
                                                      ("train", 2), ("train", 3)]
    steps = tb_steps(tmp_path)
    assert steps == {"sft/loss": [1, 2, 3], "train/reward_mean": [1, 2, 3]}, steps
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [round(e.value, 6) for e in acc.Scalars("train/reward_mean")] == [0.1, 0.4, 0.6]  # the resumed values


def test_a_start_over_in_the_same_run_dir_drops_the_old_events(tmp_path: Path) -> None:
    log = MetricsLogger(tmp_path, tensorboard=True)
    log.log("train", 1, {"reward_mean": 0.5})
    log.close()
    (tmp_path / "metrics.jsonl").unlink()  # what the trainer does when it starts over
    log = MetricsLogger(tmp_path, tensorboard=True)
    log.log("train", 1, {"reward_mean": 0.25})
    log.close()
    assert tb_steps(tmp_path) == {"train/reward_mean": [1]}
