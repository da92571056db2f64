"""Evaluation on held-out problems, paired comparisons, and the run's closing report.

An evaluation plays the same held-out problems every time (``heldout.py``: distinct task ids
of the eval split), with fixed sampling seeds:

* at the training temperature (``sampled_`` keys; the primary number: the policy as it is
  trained and sampled), ``samples`` episodes per problem in the warm-start and final
  evaluations, so ``pass@k`` (k <= samples) comes with it;
* at ``log.eval_temperature`` (plain keys; greedy by default: the secondary number).

Its record (one ``eval`` row of ``metrics.jsonl``) holds ``success`` with a 95% interval
(``success_lo``/``success_hi``: Wilson; with several samples per problem at the effective
sample size of the per-problem means, since samples of one problem are correlated), ``problems``, ``samples``, ``episodes``, ``pass_at_K``,
``wellformed`` (share of episodes whose tool loop is well formed, :func:`episode_wellformed`),
``problems_hash`` (digest of the problem list) and ``outcomes``, the per-episode results as a
string of 0/1, problem-major, so that two evaluations of the same problems are compared
problem by problem (:func:`gain`: a paired difference with its standard error).

:func:`report_lines` is what ``agentgym-train`` prints at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentgym.trainer.health import LABELS, health_summary
from agentgym.trainer.metrics import episode_stats, episode_success, read_metrics

__all__ = ["ARM_NAMES", "STAGE_NAMES", "collect_fixed", "episode_wellformed", "eval_record", "gain", "pass_at_k",
           "per_problem", "report_lines", "wilson"]

STAGE_NAMES = {"init": "untrained", "warm_start": "warm start", "ppo": "after {arm}"}
ARM_NAMES = {"ppo": "PPO", "placebo": "placebo", "rft": "RFT", "sft": "SFT"}
Z95 = 1.959964


def wilson(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a success rate k/n (sensible at 0/n and n/n too; ``n`` may
    be an effective sample size, ``k`` then fractional)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples with ``c`` successes (Chen et al.,
    2021): 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def collect_fixed(collector: Any, episodes: int | None = None, *, temperature: float, sample_seed: int,
                  options: Any = None, seed_base: int = 0, seeds: Sequence[int] | None = None,
                  samples: int = 1, on_chunk: Callable[[int], None] | None = None) -> list[Any]:
    """Play each problem seed ``samples`` times (problem-major: seed 0's samples first), in
    chunks of the collector's pool. ``seeds`` default: ``seed_base .. seed_base + episodes - 1``.

    Chunk ``c`` samples with ``sample_seed + c``: the same problems and the same random numbers
    every time, so two sets of weights are compared on identical conditions. ``on_chunk(n)``
    is told the episodes done so far after each chunk (progress).
    """
    if seeds is None:
        seeds = [seed_base + i for i in range(episodes or 0)]
    order = [s for s in seeds for _ in range(samples)]
    chunk = len(collector.pool)
    trajs: list[Any] = []
    for c, start in enumerate(range(0, len(order), chunk)):
        got, _ = collector.collect(order[start:start + chunk], temperature=temperature,
                                   sample_seed=sample_seed + c, options=options)
        trajs += got
        if on_chunk is not None:
            on_chunk(len(trajs))
    return trajs


def episode_wellformed(traj: Any, needs_tool: bool) -> bool:
    """The episode went through the env's loop as meant: every action parsed and every tool call
    succeeded (no turn with an error), a tool was called if the env has tools, and it ended
    with a final answer (terminated, not cut by a budget). Right or wrong answer alike."""
    turns = traj.turns
    return (bool(turns) and traj.terminated and not any(u.error for u in turns)
            and (not needs_tool or any(u.tool for u in turns)))


def eval_record(trajs: Sequence[Any], temperature: float, prefix: str = "", *, samples: int = 1,
                needs_tool: bool = False, task_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Episode statistics of one evaluation (module doc), ``samples`` consecutive episodes per problem."""
    from agentgym.trainer.heldout import problems_hash

    ok = [episode_success(t) for t in trajs]
    n_prob = len(ok) // max(samples, 1)
    means = per_problem("".join("1" if x else "0" for x in ok), samples)
    mean = sum(ok) / len(ok) if ok else 0.0
    if samples == 1:
        lo, hi = wilson(sum(ok), len(ok))
    else:  # Wilson at the effective sample size of the per-problem means (samples are clustered)
        se = _se(means)
        n_eff = min(float(len(ok)), mean * (1 - mean) / se**2) if se > 0 else float(n_prob)
        lo, hi = wilson(mean * n_eff, n_eff) if n_eff > 0 else (0.0, 1.0)
    m: dict[str, Any] = {**episode_stats(list(trajs)), "success": mean, "success_lo": lo, "success_hi": hi,
                         "episodes": len(ok), "problems": n_prob, "samples": samples,
                         "temperature": temperature,
                         "wellformed": sum(episode_wellformed(t, needs_tool) for t in trajs) / max(len(ok), 1),
                         "outcomes": "".join("1" if x else "0" for x in ok)}
    for k in sorted({1, *(2**i for i in range(1, 8) if 2**i < samples), samples}):
        c = [round(x * samples) for x in means]
        m[f"pass_at_{k}"] = sum(pass_at_k(samples, ci, k) for ci in c) / max(len(c), 1)
    if task_ids is not None:
        m["problems_hash"] = problems_hash(list(task_ids))
    return {prefix + k: v for k, v in m.items()}


def per_problem(outcomes: str, samples: int) -> list[float]:
    """Per-problem success rates from a problem-major 0/1 string of ``samples`` per problem."""
    s = max(samples, 1)
    return [outcomes[i:i + s].count("1") / s for i in range(0, len(outcomes) - s + 1, s)]


def _se(xs: Sequence[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mu = sum(xs) / n
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (n - 1) / n)


def gain(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> dict[str, float] | None:
    """after - before success on the same problems, paired problem by problem: the mean of the
    per-problem differences, its standard error (``se``), the unpaired one (``se_unpaired``, a
    conservative bound) and ``z`` = gain / se. None when the two are not the same problems."""
    a, b = before.get(prefix + "outcomes"), after.get(prefix + "outcomes")
    if not a or not b:
        return None
    sa, sb = int(before.get(prefix + "samples", 1)), int(after.get(prefix + "samples", 1))
    ha, hb = before.get(prefix + "problems_hash"), after.get(prefix + "problems_hash")
    pa, pb = per_problem(a, sa), per_problem(b, sb)
    if not pa or len(pa) != len(pb) or (ha is not None and hb is not None and ha != hb):
        return None
    d = [y - x for x, y in zip(pa, pb)]
    n = len(d)
    mean = sum(d) / n
    se = _se(d)
    se_unpaired = math.sqrt(_se(pa) ** 2 + _se(pb) ** 2)
    z = mean / se if se > 0 else (math.inf if mean > 0 else (-math.inf if mean < 0 else 0.0))
    return {"gain": mean, "se": se, "se_unpaired": se_unpaired, "z": z, "problems": float(n)}


def _stages(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> its latest evaluation row (``ppo``: the final one)."""
    return {r.get("stage", "ppo"): r for r in rows if r["phase"] == "eval"}


def _run_arm(run_dir: str) -> str:
    import yaml

    p = Path(run_dir) / "config.yaml"
    if not p.exists():
        return "ppo"
    from agentgym.trainer.config import config_from_dict

    try:
        return config_from_dict(yaml.safe_load(p.read_text()) or {}).arm()
    except Exception:  # an old or foreign config: the report still prints
        return "ppo"


def _cell(r: dict[str, Any], prefix: str, name: str) -> str:
    return (f"{name} {r[prefix + 'success']:.3f} [{r[prefix + 'success_lo']:.2f}, {r[prefix + 'success_hi']:.2f}]")


def fmt_gain(g: dict[str, float] | None) -> str:
    if g is None:
        return "n/a (not the same problems)"
    return f"{g['gain']:+.3f} ± {g['se']:.3f} paired ({g['z']:.1f} SE)"


def report_lines(run_dir: str) -> list[str]:
    """The closing report: held-out success at the training temperature (primary, with pass@k)
    and greedy (secondary) for untrained / warm start / end, the gain over the warm start
    paired on the same problems, whether evaluation was held out, the warm start's verdict and
    the health monitor's alerts."""
    rows = read_metrics(run_dir)
    stages = _stages(rows)
    arm = ARM_NAMES.get(_run_arm(run_dir), "PPO")
    names = {k: v.format(arm=arm) for k, v in STAGE_NAMES.items()}
    lines = []
    for prefix, what in (("sampled_", "primary"), ("", "secondary")):
        cells = []
        for stage, name in names.items():
            r = stages.get(stage)
            if r is None or prefix + "success" not in r:
                continue
            cells.append(_cell(r, prefix, name))
        if not cells:
            continue
        ref = stages.get("ppo") or stages.get("warm_start") or {}
        t = ref.get(prefix + "temperature")
        temp = ("greedy" if t == 0 else f"T={t:g}") if isinstance(t, (int, float)) else "?"
        size = f"{ref.get(prefix + 'problems', '?')} problems"
        if int(ref.get(prefix + "samples", 1)) > 1:
            size += f" x {ref[prefix + 'samples']} samples"
        line = f"held-out success, {temp} ({what}; {size}): " + " -> ".join(cells)
        if {"warm_start", "ppo"} <= set(stages):
            w, e = stages["warm_start"], stages["ppo"]
            line += f"; gain over the warm start {fmt_gain(gain(w, e, prefix))}"
            ks = sorted(int(k.removeprefix(prefix + "pass_at_")) for k in e
                        if k.startswith(prefix + "pass_at_") and k.removeprefix(prefix + "pass_at_").isdigit())
            if ks and ks[-1] > 1 and f"{prefix}pass_at_{ks[-1]}" in w:
                k = ks[-1]
                line += f"; pass@{k} {w[f'{prefix}pass_at_{k}']:.3f} -> {e[f'{prefix}pass_at_{k}']:.3f}"
        lines.append(line)
    held = [r for r in rows if r["phase"] == "held_out"]
    if held:
        h = held[-1]
        seen = sum(int(r.get("held_out_overlap", 0)) for r in rows if r["phase"] in ("train", "sft", "held_out"))
        lines.append(f"held out: {h['eval_problems']} distinct evaluation problems ({h['how']}); "
                     + ("none drawn in training" if not seen else
                        f"NOT held out: {seen} training episode(s) drew evaluation problems"))
    warm = [r for r in rows if r["phase"] == "warm_start"]
    if warm:
        lines.append(warm_start_line(warm[-1]))
    train = [r for r in rows if r["phase"] == "train"]
    if train:
        fired = health_summary(train)
        lines.append("health: " + ("; ".join(f"{LABELS[k]} at step(s) {', '.join(map(str, v))}"
                                            for k, v in fired.items()) if fired else "no alerts")
                     + f" in {len(train)} steps")
    if lines:
        lines.append(f"run dir: {run_dir}")
    return lines


def warm_start_line(w: dict[str, Any]) -> str:
    """One line on the warm start: its source, steps, stopping reason and verdict."""
    head = "WARM START FAILED" if w.get("failed") else "warm start"
    parts = [f"teacher {w.get('teacher', 'oracle')}"]
    if w.get("loaded_from"):
        parts.append(f"loaded from {w['loaded_from']}")
    if w.get("steps") is not None:
        parts.append(f"{w['steps']} steps ({w.get('stop_reason', 'max steps')})")
    if w.get("wellformed") is not None:
        parts.append(f"well-formed tool loop on {w['wellformed']:.2f} of held-out episodes "
                     f"(bound {w.get('min_wellformed', 0):g})")
    line = f"{head}: " + ", ".join(parts)
    if str(w.get("teacher", "oracle")).startswith("defect-"):
        line += ("; this teacher PLANTS A DEFECT: a gain over this warm start is the defect being "
                 "undone, not a gain over an honest baseline")
    return line
