"""PNG plots of a run from its ``metrics.jsonl`` (matplotlib, headless Agg backend).

``write_plots(run_dir)`` writes ``run_dir/plots/{held_out,reward,kl,entropy,grad_norm,clip_frac,
mismatch,sft}.png`` and returns their paths; a panel whose metric was never logged is skipped.
``held_out`` is the learning curve: every evaluation's success on the held-out problems with
its 95% interval, at the training temperature (primary) and greedy (the untrained policy at
step 0 as a separate marker), and the steps where the health monitor raised an alert. The
reward panel draws the same over the training reward; the warm-start panel adds the held-out
stopping check's pass@1 and pass@k.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.trainer.metrics import read_metrics

__all__ = ["PANELS", "write_plots"]

# file name -> (title, [(phase, key, label)]); "eval/init" is the evaluation of the untrained
# policy (drawn as one marker), "eval" the ones after the warm start.
PANELS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "held_out": ("Held-out success (fixed problems, never trained on)", []),
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
                                                ("train", "mismatch_w_mean", "IS weight mean"),
                                                ("train", "mismatch_ess", "IS weight ESS"),
                                                ("train", "mismatch_capped_frac", "share at the cap / masked"),
                                                ("train", "engine_staleness", "engine staleness (updates)")]),
    "sft": ("Warm start", [("sft", "loss", "NLL of policy tokens"),
                           ("sft", "demo_token_p", "per-token prob of demos"),
                           ("sft", "check_pass_at_1", "held-out check pass@1"),
                           ("sft", "check_wellformed", "held-out check well-formed")]),
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


# evaluation success with 95% intervals on the held-out and reward panels: (prefix, label, stage)
EVAL_SERIES: list[tuple[str, str, str]] = [("sampled_", "held-out success, training temperature", "after"),
                                           ("", "held-out success, greedy", "after"),
                                           ("sampled_", "untrained, training temperature", "init"),
                                           ("", "untrained, greedy", "init")]


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
            ns = sorted({int(r.get(prefix + "problems", r.get(prefix + "episodes", 0))) for r in rows
                         if r["phase"] == "eval" and (r.get("stage") == "init") == (which == "init")
                         and r.get(prefix + "episodes")})
            n = "/".join(map(str, ns))  # e.g. "64/256": fewer problems in between, more at the ends
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, marker="x" if which == "init" else "o",
                        markersize=5, linestyle="none" if which == "init" else "-",
                        label=label + (f" ({n} problems)" if n and which != "init" else ""))
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
            if key == "check_pass_at_1":  # pass@k of the check sits under its own key
                ks = sorted({k for r in rows if r["phase"] == "sft" for k in r
                             if k.startswith("check_pass_at_") and k != "check_pass_at_1"})
                for k in ks:
                    kx, ky = _series(rows, "sft", k)
                    ax.plot(kx, ky, marker="o", markersize=3, label=f"held-out check pass@{k.rsplit('_', 1)[1]}")
                    drawn += 1
            if xs:
                style: dict[str, Any] = {"marker": "o" if len(xs) < 20 else None, "markersize": 3}
                if len(xs) == 1:  # a single evaluation: a marker, not an invisible line
                    style = {"marker": "x", "markersize": 7, "linestyle": "none"}
                ax.plot(xs, ys, label=label, **style)
                drawn += 1
        if name in ("reward", "held_out"):
            drawn += _draw_evals(ax, rows)
        if drawn:
            ax.set_title(title)
            ax.set_xlabel("SFT step" if series and series[0][0] == "sft" else "step after the warm start")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{name}.png"
            fig.savefig(path, dpi=100)
            written.append(path)
        plt.close(fig)
    return written
