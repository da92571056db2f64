"""docs/training/from-trl.md maps TRL's GRPO names to agentgym's: every TRL name on it is a field of
the installed ``GRPOConfig`` (or an argument of ``GRPOTrainer``), every agentgym key one of the config's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "training" / "from-trl.md"


def _keys(d: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k not in ("kwargs", "tiny", "engine_kwargs", "init", "train_options",
                                             "eval_options"):
            out |= _keys(v, f"{prefix}{k}.")
    return out


def test_every_name_in_the_trl_table_exists_on_both_sides() -> None:
    trl = pytest.importorskip("trl", reason="the [dev] extra has trl")
    from agentgym.trainer.config import TrainConfig, config_to_dict

    theirs = set(trl.GRPOConfig.__dataclass_fields__) | set(inspect.signature(trl.GRPOTrainer.__init__).parameters)
    ours = _keys(config_to_dict(TrainConfig()))
    rows = [line.split("|")[1:4] for line in PAGE.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| TRL")]
    assert len(rows) >= 25
    for trl_cell, our_cell, _ in rows:
        for name in re.findall(r"`([^`]+)`", trl_cell):
            assert name in theirs, f"{name!r} is not a GRPOConfig field nor a GRPOTrainer argument"
        for key in re.findall(r"`([^`]+)`", our_cell):
            key = key.split(":")[0].strip()
            assert key in ours, f"{key!r} is not an agentgym config key"
