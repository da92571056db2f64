"""PNG plots of a run from its ``metrics.jsonl`` (matplotlib, headless Agg backend).

``write_plots(run_dir)`` writes ``run_dir/plots/NAME.png`` for each figure of :data:`FIGURES`
that has something to show and returns their paths. Each figure is a column of axes, one
quantity per axis, each with its unit on the y label; the x axis is the PPO step, or the
warm-start step on the warm-start figure (the two are never on one axis). Legends sit to the
right of the axes, off the data. A diagnostic that never changes (the engine/learner mismatch of
the in-process engine, exactly 0) is left out (the training reward is drawn even when flat), an axis with nothing left is dropped, and a
figure with no axis left is not written.

``held_out`` is the learning curve: every evaluation's success on the held-out problems with
its 95% interval, at the training temperature and greedy (the untrained policy as a separate
marker), and the steps where the health monitor raised an alert. ``sft`` shows the
warm start: its loss, the demonstrations' per-token probability, the held-out stopping check.

``write_controls_plot(run_dir, warm, mine, controls)`` writes ``plots/controls.png`` after a run
with controls (:mod:`.controls` passes the final evaluations): every arm's held-out success with
its 95% interval beside the warm start's, and this run's paired difference from each control
with its 95% interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.scores import Z95

from .metrics import read_metrics
from .stats import ARM_NAMES, gain

__all__ = ["FIGURES", "Axis", "build_figures", "write_controls_plot", "write_plots"]


@dataclass(frozen=True)
class Axis:
    ylabel: str  # the quantity and its unit
    series: tuple[tuple[str, str], ...]  # (key in the phase's rows, legend label)
    evals: bool = False  # also the held-out evaluations with their intervals (a success rate)
    unit_range: bool = False  # a share or probability: y from 0 to 1
    keep_flat: bool = False  # drawn even when it never changes (a reward stuck at 0 is a result)


# file name -> (title, phase of the x axis, its axes). "train": PPO steps; "sft": warm-start steps.
FIGURES: dict[str, tuple[str, str, list[Axis]]] = {
    "held_out": ("Held-out success (fixed problems, never trained on)", "train", [
        Axis("success rate", (), evals=True, unit_range=True)]),
    "reward": ("Training reward (sampled, new tasks each step)", "train", [
        Axis("mean reward per episode", (("reward_mean", "train reward"),), keep_flat=True),
        Axis("success rate", (("success", "train success"),), unit_range=True, keep_flat=True)]),
    "kl": ("KL divergences (nats per policy token)", "train", [
        Axis("KL to reference", (("kl_ref", "KL to the warm start"),)),
        Axis("approx. KL old -> new", (("approx_kl", "one update's KL"),)),
        Axis("engine/learner k3", (("mismatch_k3", "KL(engine || learner)"),))]),
    "entropy": ("Policy entropy", "train", [Axis("entropy (nats per policy token)", (("entropy", "entropy"),))]),
    "grad_norm": ("Gradient norm before clipping (PPO)", "train", [Axis("grad norm", (("grad_norm", "PPO"),))]),
    "clip_frac": ("PPO clip fraction", "train", [
        Axis("share of tokens clipped", (("clip_frac", "clip fraction"),), unit_range=True)]),
    "mismatch": ("Engine vs learner mismatch", "train", [
        Axis("|log p learner - log p engine|", (("mismatch_abs_dlogp_mean", "mean"), ("mismatch_abs_dlogp_max", "max"))),
        Axis("correction weight", (("mismatch_w_mean", "mean IS weight"),)),
        Axis("share of tokens", (("mismatch_ess", "ESS of the IS weights"),
                                 ("mismatch_capped_frac", "at the cap or masked")), unit_range=True),
        Axis("engine staleness (updates)", (("engine_staleness", "staleness"),))]),
    "sft": ("Warm start (SFT on oracle demonstrations)", "sft", [
        Axis("NLL (nats per policy token)", (("loss", "NLL of the demonstrations"),)),
        Axis("probability", (("demo_token_p", "per-token probability of the demos"),), unit_range=True),
        Axis("share of held-out problems", (("check_pass_at_*", "held-out check"),
                                            ("check_wellformed", "held-out check, well-formed")), unit_range=True),
        Axis("grad norm", (("grad_norm", "warm start"),))]),
}

# evaluations with 95% intervals: (prefix, label, which: "after" the warm start or the untrained "init")
EVAL_SERIES: list[tuple[str, str, str]] = [("sampled_", "training temperature", "after"),
                                           ("", "greedy", "after"),
                                           ("sampled_", "untrained, training temperature", "init"),
                                           ("", "untrained, greedy", "init")]
XLABEL = {"train": "PPO step (0: after the warm start)", "sft": "warm-start step"}


def _series(rows: list[dict[str, Any]], phase: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if r["phase"] == phase and isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def _keys(rows: list[dict[str, Any]], phase: str, key: str) -> list[tuple[str, str]]:
    """``key`` itself, or every key matching a trailing ``*`` (``check_pass_at_*``: pass@1, pass@8)."""
    if not key.endswith("*"):
        return [(key, "")]
    found = sorted({k for r in rows if r["phase"] == phase for k in r if k.startswith(key[:-1])},
                   key=lambda k: int(k.rsplit("_", 1)[1]) if k.rsplit("_", 1)[1].isdigit() else 0)
    return [(k, f" pass@{k.rsplit('_', 1)[1]}") for k in found]


def _changes(ys: list[float]) -> bool:
    return len(ys) > 0 and (len(ys) == 1 or max(ys) - min(ys) > 1e-12)


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
                        label=label + (f" ({n} problems, 95% interval)" if n and which != "init" else ""))
            drawn += 1
    alerts = [int(r["step"]) for r in rows if r["phase"] == "train" and r.get("health_alerts")]
    if alerts and drawn:
        ax.scatter(alerts, [0.0] * len(alerts), marker="|", s=80, color="red", label="health alert", zorder=3)
    return drawn


def _plot_axis(ax: Any, rows: list[dict[str, Any]], phase: str, axis: Axis) -> int:
    drawn = _draw_evals(ax, rows) if axis.evals else 0
    for key, label in axis.series:
        for k, suffix in _keys(rows, phase, key):
            xs, ys = _series(rows, phase, k)
            if not ys or not (axis.keep_flat or _changes(ys)):  # a constant (0 on the in-process engine): nothing to read
                continue
            style: dict[str, Any] = {"marker": "o" if len(xs) < 20 else None, "markersize": 3}
            if len(xs) == 1:  # one point: a marker, not an invisible line
                style = {"marker": "x", "markersize": 7, "linestyle": "none"}
            ax.plot(xs, ys, label=label + suffix, **style)
            drawn += 1
    if drawn:
        ax.set_ylabel(axis.ylabel)
        ax.grid(alpha=0.3)
        if axis.unit_range:
            ax.set_ylim(-0.03, 1.03)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return drawn


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:  # plots are a convenience: say so and go on
        print("plots skipped: pip install 'agentgym-suite[train]' for matplotlib")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def build_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figure name -> matplotlib Figure of :data:`FIGURES` drawn from metrics ``rows`` (those with
    something to show); the caller saves and closes them. Empty without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return {}
    out = {}
    for name, (title, phase, axes) in FIGURES.items():
        # which axes have anything to draw: only those get a place in the figure
        probe = plt.figure()
        keep = [a for a in axes if _plot_axis(probe.add_subplot(), rows, phase, a)]
        plt.close(probe)
        if not keep:
            continue
        fig, axs = plt.subplots(len(keep), 1, figsize=(8, 1.2 + 2.2 * len(keep)), sharex=True, squeeze=False)
        for ax, axis in zip(axs[:, 0], keep):
            _plot_axis(ax, rows, phase, axis)
        axs[0, 0].set_title(title)
        axs[-1, 0].set_xlabel(XLABEL[phase])
        out[name] = fig
    return out


def write_plots(run_dir: str | Path) -> list[Path]:
    """Write ``run_dir/plots/NAME.png`` for each figure with something to show; their paths."""
    figs = build_figures(read_metrics(run_dir))
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figs.items():
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")  # "tight": the legends right of the axes stay in
        _pyplot().close(fig)
        written.append(path)
    return written


def write_controls_plot(run_dir: str | Path, warm: dict[str, Any] | None, mine: dict[str, Any],
                        controls: dict[str, dict[str, Any] | None], main_arm: str = "ppo") -> Path | None:
    """``run_dir/plots/controls.png`` from the final evaluations (``eval`` rows) of the warm start, this
    run and each control arm: every one's held-out success (95% interval), and ``main_arm`` - each
    control on the same problems (paired, 95% interval), at the training temperature."""
    plt = _pyplot()
    if plt is None:
        return None
    p = "sampled_" if "sampled_success" in mine else ""
    me = ARM_NAMES.get(main_arm, main_arm)
    results = [("warm start", warm), (me, mine)] + [(ARM_NAMES.get(a, a), r) for a, r in controls.items()]
    shown = [(n, r) for n, r in results if r is not None and p + "success" in r]
    pairs = [(ARM_NAMES.get(a, a), gain(r, mine, p) if r is not None else None) for a, r in controls.items()]
    gaps = [(n, g) for n, g in pairs if g is not None]
    t = mine.get(p + "temperature")
    temp = "greedy" if t == 0 else f"temperature {t:g}" if isinstance(t, (int, float)) else "training temperature"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    ys = [float(r[p + "success"]) for _, r in shown]
    lo = [y - float(r.get(p + "success_lo", y)) for y, (_, r) in zip(ys, shown)]
    hi = [float(r.get(p + "success_hi", y)) - y for y, (_, r) in zip(ys, shown)]
    colors = ["0.6" if n == "warm start" else "C0" if n == me else "C1" for n, _ in shown]
    left.bar(range(len(shown)), ys, yerr=[lo, hi], capsize=4, color=colors)
    left.set_xticks(range(len(shown)), [n for n, _ in shown])
    left.set_ylim(0, 1.05)
    left.set_ylabel("held-out success rate")
    left.set_title(f"Final held-out success, {temp} (95% intervals)", fontsize=10)
    left.grid(axis="y", alpha=0.3)
    if gaps:
        right.errorbar([g["gain"] for _, g in gaps], range(len(gaps)), xerr=[Z95 * g["se"] for _, g in gaps],
                       fmt="o", capsize=4)
        right.set_yticks(range(len(gaps)), [f"{me} - {n}" for n, _ in gaps])
        right.axvline(0.0, color="0.4", linewidth=1)
        right.set_xlabel("difference in held-out success (paired, 95% interval)")
        right.set_title("This run against each control, same problems", fontsize=10)
        right.grid(axis="x", alpha=0.3)
    else:
        right.set_axis_off()
    out = Path(run_dir) / "plots" / "controls.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out
