"""Scores of a submission: per-env means with 95% intervals, pass^k, and their macro average.

The unit of sampling is the *task*: trials of one task are correlated (an easy task is easy
every time), so treating every episode as independent would make the interval too narrow.
The standard error comes from the per-task means (a cluster-robust estimate); it is turned
into an effective sample size ``n_eff = p(1-p) / se^2`` (Kish), bounded by the number of
tasks below and of episodes above, and the interval is Wilson's score interval at ``n_eff``,
which stays inside [0, 1] and is not degenerate at 0% or 100% (there ``n_eff`` = tasks).

``pass^k`` (tau-bench) is the chance that *all* k trials of a task succeed, estimated without
bias per task as ``C(c, k) / C(n, k)`` for ``c`` successes in ``n`` trials, averaged over tasks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym.scores import Z95, solved, wilson  # the one success rule and interval (re-exported)

__all__ = ["Z95", "env_summary", "overall_summary", "pass_hat_k", "wilson"]

def pass_hat_k(successes: Sequence[int], trials: Sequence[int], k: int) -> float:
    """Mean over tasks of C(c, k) / C(n, k): the chance that k fresh trials all succeed."""
    vals = [math.comb(c, k) / math.comb(n, k) for c, n in zip(successes, trials) if n >= k]
    return sum(vals) / len(vals) if vals else 0.0


def env_summary(scores: Mapping[int, Sequence[float]], k: int) -> dict[str, Any]:
    """``scores``: task -> the outcomes of its trials (each in [0, 1]). Returns mean, ci95, pass^k,
    tasks, episodes and se (the standard error of the mean over tasks)."""
    tasks = [list(v) for _, v in sorted(scores.items()) if v]
    n_tasks, n_eps = len(tasks), sum(len(t) for t in tasks)
    if n_tasks == 0:
        return {"mean": 0.0, "ci95": [0.0, 1.0], "pass_k": 0.0, "k": k, "tasks": 0, "episodes": 0, "se": 0.0}
    means = [sum(t) / len(t) for t in tasks]
    p = sum(means) / n_tasks
    var = sum((m - p) ** 2 for m in means) / (n_tasks - 1) if n_tasks > 1 else 0.0
    se = math.sqrt(var / n_tasks)
    n_eff = float(n_tasks) if se == 0 else min(max(p * (1 - p) / (se * se), n_tasks), n_eps)
    lo, hi = wilson(p, n_eff)
    succ = [sum(1 for x in t if solved(x)) for t in tasks]
    return {"mean": p, "ci95": [lo, hi], "pass_k": pass_hat_k(succ, [len(t) for t in tasks], k), "k": k,
            "tasks": n_tasks, "episodes": n_eps, "se": se}


def overall_summary(per_env: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Macro average over envs (each env weighs the same); the interval combines the envs'
    standard errors as independent, again through Wilson at the implied effective size."""
    envs = [v for v in per_env.values() if v["tasks"]]
    if not envs:
        return {"mean": 0.0, "ci95": [0.0, 1.0], "pass_k": 0.0, "tasks": 0, "episodes": 0, "se": 0.0}
    e = len(envs)
    p = sum(v["mean"] for v in envs) / e
    se = math.sqrt(sum(v["se"] ** 2 for v in envs)) / e
    n_tasks, n_eps = sum(v["tasks"] for v in envs), sum(v["episodes"] for v in envs)
    n_eff = float(n_tasks) if se == 0 else min(max(p * (1 - p) / (se * se), n_tasks), n_eps)
    lo, hi = wilson(p, n_eff)
    return {"mean": p, "ci95": [lo, hi], "pass_k": sum(v["pass_k"] for v in envs) / e,
            "tasks": n_tasks, "episodes": n_eps, "se": se}
