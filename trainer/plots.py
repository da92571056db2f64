"""PNG plots of a run from its ``metrics.jsonl`` (matplotlib, headless Agg backend).

``write_plots(run_dir)`` writes ``run_dir/plots/{reward,kl,entropy,grad_norm,clip_frac,
mismatch,sft}.png`` and returns their paths; a panel whose metric was never logged is skipped.
The reward panel also draws every evaluation's success on its fixed tasks with its 95%
interval (greedy, and sampled when the run evaluates both; the untrained policy at step 0
as a separate marker) and marks the steps where the health monitor raised an alert.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.trainer.metrics import read_metrics

__all__ = ["PANELS", "write_plots"]

# file name -> (title, [(phase, key, label)]); "eval/init" is the evaluation of the untrained
# policy (drawn as one marker), "eval" the ones after the warm start.
PANELS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "reward": ("Reward and success", [("train", "reward_mean", "train reward (sampled, new tasks)"),
                                      ("train", "success", "train success")]),
    "kl": ("KL", [("train", "kl_ref", "KL to reference"), ("train", "approx_kl", "approx KL old->new"),
                  ("train", "mismatch_k3", "engine/trainer k3")]),
    "entropy": ("Policy entropy (per policy token)", [("train", "entropy", "entropy")]),
    "grad_norm": ("Gradient norm (before clipping)", [("train", "grad_norm", "ppo"),
                                                     ("sft", "grad_norm", "warm start")]),
    "clip_frac": ("Clip fraction", [("train", "clip_frac", "clip fraction")]),
    "mismatch": ("Engine vs trainer mismatch", [("train", "mismatch_abs_dlogp_mean", "mean |dlogp|"),
                                                ("train", "mismatch_abs_dlogp_max", "max |dlogp|"),
                                                ("train", "mismatch_w_mean", "IS weight mean")]),
    "sft": ("Warm start", [("sft", "loss", "NLL of policy tokens"),
                           ("sft", "demo_token_p", "per-token prob of demos")]),
}


def _series(rows: list[dict[str, Any]], phase: str, key: str) -> tuple[list[int], list[float]]:
    phase, _, stage = phase.partition("/")
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if (r["phase"] == phase and isinstance(v, (int, float))
                and (r.get("stage") == "init") == (stage == "init")):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


# evaluation success with 95% intervals on the reward panel: (key prefix, label, stage filter)
EVAL_SERIES: list[tuple[str, str, str]] = [("", "eval success, greedy", "after"),
                                           ("sampled_", "eval success, sampled", "after"),
                                           ("", "untrained, greedy", "init"),
                                           ("sampled_", "untrained, sampled", "init")]


def _eval_points(rows: list[dict[str, Any]], prefix: str, which: str) -> tuple[list[float], ...]:
    xs: list[float] = []
    ys: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for r in rows:
        if r["phase"] != "eval" or (r.get("stage") == "init") != (which == "init"):
            continue
        y = r.get(prefix + "success")
        if not isinstance(y, (int, float)):
            continue
        xs.append(float(r["step"]))
        ys.append(float(y))
        lo.append(float(y) - float(r.get(prefix + "success_lo", y)))
        hi.append(float(r.get(prefix + "success_hi", y)) - float(y))
    return xs, ys, lo, hi


def _draw_evals(ax: Any, rows: list[dict[str, Any]]) -> int:
    drawn = 0
    for prefix, label, which in EVAL_SERIES:
        xs, ys, lo, hi = _eval_points(rows, prefix, which)
        if xs:
            ns = sorted({int(r[prefix + "episodes"]) for r in rows if r["phase"] == "eval"
                         and (r.get("stage") == "init") == (which == "init") and r.get(prefix + "episodes")})
            n = "/".join(map(str, ns))  # e.g. "64/256": fewer tasks in between, more at the ends
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, marker="x" if which == "init" else "o",
                        markersize=5, linestyle="none" if which == "init" else "-",
                        label=label + (f" (fixed tasks, n={n})" if n and which != "init" else ""))
            drawn += 1
    alerts = [int(r["step"]) for r in rows if r["phase"] == "train" and r.get("health_alerts")]
    if alerts:
        ax.scatter(alerts, [0.0] * len(alerts), marker="|", s=80, color="red", label="health alert")
        drawn += 1
    return drawn


def write_plots(run_dir: str | Path) -> list[Path]:
    try:
        import matplotlib
    except ImportError:  # plots are a convenience: say so and go on
        print("plots skipped: pip install 'agentgym-suite[train]' for matplotlib")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (title, series) in PANELS.items():
        fig, ax = plt.subplots(figsize=(6, 3.6))
        drawn = 0
        for phase, key, label in series:
            xs, ys = _series(rows, phase, key)
            if xs:
                style: dict[str, Any] = {"marker": "o" if len(xs) < 20 else None, "markersize": 3}
                if len(xs) == 1:  # a single evaluation: a marker, not an invisible line
                    style = {"marker": "x", "markersize": 7, "linestyle": "none"}
                ax.plot(xs, ys, label=label, **style)
                drawn += 1
        if name == "reward":
            drawn += _draw_evals(ax, rows)
        if drawn:
            ax.set_title(title)
            ax.set_xlabel("SFT step" if series[0][0] == "sft" else "PPO step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{name}.png"
            fig.savefig(path, dpi=100)
            written.append(path)
        plt.close(fig)
    return written
