"""Evaluation on fixed tasks, with intervals, and the run's closing report.

An evaluation plays the same tasks (eval seeds ``0..n-1``) every time, greedily (at
``log.eval_temperature``) and, with ``log.eval_sampled``, once more at the training
temperature with a fixed sampling seed. Its record (one ``eval`` row of ``metrics.jsonl``)
holds the greedy numbers as plain keys and the sampled ones with a ``sampled_`` prefix:
``success`` with its 95% Wilson interval (``success_lo``, ``success_hi``), the number of
``episodes``, and ``outcomes``, the per-task results as a string of 0/1, so two evaluations
of the same tasks can be compared task by task (a paired difference).

:func:`gain` is PPO's own gain (after PPO minus the warm start) with its standard error;
:func:`report_lines` is what ``agentgym-train`` prints at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.trainer.health import LABELS, health_summary
from agentgym.trainer.metrics import episode_stats, episode_success, read_metrics

__all__ = ["STAGE_NAMES", "collect_fixed", "eval_record", "gain", "report_lines", "wilson"]

STAGE_NAMES = {"init": "untrained", "warm_start": "warm start", "ppo": "after PPO"}
Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a success rate k/n (sensible at 0/n and n/n too)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def collect_fixed(collector: Any, episodes: int, *, temperature: float, sample_seed: int,
                  options: Any = None, seed_base: int = 0,
                  on_chunk: Callable[[int], None] | None = None) -> list[Any]:
    """Play tasks ``seed_base .. seed_base + episodes - 1`` in chunks of the collector's pool.

    Chunk ``c`` samples with ``sample_seed + c``: the same tasks and the same random numbers
    every time, so two sets of weights are compared on identical conditions. ``on_chunk(n)``
    is told the episodes done so far after each chunk (progress).
    """
    chunk = len(collector.pool)
    trajs: list[Any] = []
    for c, start in enumerate(range(0, episodes, chunk)):
        seeds = [seed_base + start + i for i in range(min(chunk, episodes - start))]
        got, _ = collector.collect(seeds, temperature=temperature, sample_seed=sample_seed + c,
                                   options=options)
        trajs += got
        if on_chunk is not None:
            on_chunk(len(trajs))
    return trajs


def eval_record(trajs: Sequence[Any], temperature: float, prefix: str = "") -> dict[str, Any]:
    """Episode statistics + ``success_lo/hi`` (Wilson 95%), ``episodes``, ``outcomes`` (0/1 string)."""
    ok = [episode_success(t) for t in trajs]
    lo, hi = wilson(sum(ok), len(ok))
    m: dict[str, Any] = {**episode_stats(list(trajs)), "success_lo": lo, "success_hi": hi,
                         "episodes": len(ok), "temperature": temperature,
                         "outcomes": "".join("1" if x else "0" for x in ok)}
    return {prefix + k: v for k, v in m.items()}


def gain(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> dict[str, float] | None:
    """after - before success on the same tasks: the difference, its paired standard error
    (per-task differences) and the unpaired one (a conservative bound), and diff / unpaired SE."""
    a, b = before.get(prefix + "outcomes"), after.get(prefix + "outcomes")
    if not a or not b or len(a) != len(b):
        return None
    n = len(a)
    d = [int(y) - int(x) for x, y in zip(a, b)]
    mean = sum(d) / n
    paired = math.sqrt(sum((x - mean) ** 2 for x in d) / max(n - 1, 1) / n)
    p, q = a.count("1") / n, b.count("1") / n
    unpaired = math.sqrt((p * (1 - p) + q * (1 - q)) / n)
    return {"gain": mean, "se_paired": paired, "se": unpaired,
            "z": mean / unpaired if unpaired > 0 else (math.inf if mean > 0 else 0.0)}


def _stages(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> its latest evaluation row (``ppo``: the final one)."""
    return {r.get("stage", "ppo"): r for r in rows if r["phase"] == "eval"}


def report_lines(run_dir: str) -> list[str]:
    """The closing report: success with 95% intervals for untrained / warm start / after PPO,
    greedy and sampled, and PPO's own gain over the warm start in standard errors."""
    rows = read_metrics(run_dir)
    stages = _stages(rows)
    lines = []
    for prefix, what in (("", "greedy"), ("sampled_", "sampled")):
        cells = []
        for stage, name in STAGE_NAMES.items():
            r = stages.get(stage)
            if r is None or prefix + "success" not in r:
                continue
            t = r.get(prefix + "temperature")
            if prefix and isinstance(t, (int, float)):
                what = f"T={t:g}"
            cells.append(f"{name} {r[prefix + 'success']:.2f} [{r[prefix + 'success_lo']:.2f}, "
                         f"{r[prefix + 'success_hi']:.2f}] (n={r.get(prefix + 'episodes', '?')})")
        if not cells:
            continue
        g = gain(stages["warm_start"], stages["ppo"], prefix) if {"warm_start", "ppo"} <= set(stages) else None
        tail = (f"; PPO's own gain {g['gain']:+.3f} ± {g['se']:.3f} ({g['z']:.1f} SE)" if g else "")
        lines.append(f"eval success, {what}: " + " -> ".join(cells) + tail)
    train = [r for r in rows if r["phase"] == "train"]
    if train:
        fired = health_summary(train)
        lines.append("health: " + ("; ".join(f"{LABELS[k]} at step(s) {', '.join(map(str, v))}"
                                            for k, v in fired.items()) if fired else "no alerts")
                     + f" in {len(train)} PPO steps")
    if lines:
        lines.append(f"run dir: {run_dir}")
    return lines
