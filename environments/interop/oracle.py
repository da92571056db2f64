"""The oracle of every imported env: the adapter's own (``HubEnv.oracle_action``), which raises a
ConfigError naming why when the source env has none."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["oracle_action"]


def oracle_action(env: Any) -> np.ndarray:
    return np.asarray(env.unwrapped.oracle_action(), dtype=np.int64)
