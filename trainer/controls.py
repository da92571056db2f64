"""Controls: the arms a claim that RL helps is measured against, all from one warm start.

    summary, lines = run_with_controls(cfg)    # this run, then each arm of cfg.controls
    results = run_seeds("cpu-quickstart", [17, 23], {"ppo": [...], "placebo": [...]}, out, jobs=4)

Arms (``config.ARMS``): ``ppo``; ``placebo`` (PPO on rewards permuted within each batch,
``ppo.placebo``); ``rft`` (``algo: rft``, SFT on the policy's own successful episodes);
``raft`` (``algo: raft``, best-of-group: SFT on each group's highest-reward episode); ``sft``
(``algo: sft``, continued oracle SFT on new demonstrations: the ceiling). Every arm is a run of its own that starts
from the same saved warm start (``sft.load``: weights, the warm start's AdamW moments and its
evaluation) with the same seeds, so it sees the same training task seeds, the same sampling
seeds and the same held-out problems with the same evaluation seeds as the others, and takes
the same number of episodes and optimizer steps. Their final evaluations are therefore
compared problem by problem: :func:`comparison_lines` prints paired differences with their
standard errors (primary: at the training temperature; secondary: greedy).

In one process (``controls: [placebo, rft, sft]`` in a recipe) the main run trains first and
each arm runs after it in ``RUN_DIR/controls/ARM``. Over several seeds, :func:`run_seeds` runs
each seed's warm start as one ``agentgym-train`` process (``ppo.steps=0``), then every arm as its
own process from that warm start, ``jobs`` processes at a time, seed by seed, continuing killed
runs from their checkpoints (bench/controls.py, bench/correction_compare.py), and :func:`between_seeds` compares the arms across seeds: a seed
re-draws all of a run's data, so the spread between seeds covers training noise, which the
paired SE of one seed's evaluation does not.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from .algo.batch import make_batch, micro_batches
from .algo.ppo import kl_estimate
from .config import ARMS, TrainConfig, config_from_dict, config_to_dict, load_config
from .evaluation import arm_label, collect_fixed, fmt_gain
from .health import health_summary
from .metrics import episode_success, read_metrics
from .model.files import latest_checkpoint, load_weights
from .plots import write_controls_plot
from .stats import ARM_NAMES, gain
from .train import Trainer

__all__ = ["FAILED_WARM_START", "arm_config", "arm_overrides", "between_seed_lines", "between_seeds",
           "comparison_lines", "final_eval", "kl_to_warm_start", "run_seeds", "run_with_controls", "seeds_table",
           "seed_differences", "trained_eval"]

FAILED_WARM_START = 3  # agentgym-train's exit status when the warm start did not learn
CONTROLS_DIR = "controls"


def arm_overrides(arm: str) -> list[str]:
    """The config overrides that make a run the arm ``arm``."""
    algo, placebo = ARMS[arm]
    return [f"algo={algo}", f"ppo.placebo={str(placebo).lower()}"]


def arm_config(cfg: TrainConfig, arm: str, warm_start: str | Path, run_dir: str | Path) -> TrainConfig:
    """``cfg`` as the arm ``arm``, starting from the saved ``warm_start`` in ``run_dir``."""
    d = config_to_dict(cfg)
    d["algo"], d["ppo"]["placebo"] = ARMS[arm]
    d["controls"] = []
    d["sft"]["steps"], d["sft"]["load"] = 0, str(warm_start)
    d["log"]["run_dir"] = str(run_dir)
    return config_from_dict(d)


def final_eval(run_dir: str | Path) -> dict[str, Any] | None:
    """The closing evaluation of a run: the one after its last step, or the warm start's for a
    run that takes no step (``ppo.steps=0`` in its ``config.yaml``). None while there is none: a
    run stopped part way has only the warm start's and periodic evaluations (``log.eval_every``:
    fewer problems, one sample each), and neither is its result. Without a ``config.yaml`` the
    last evaluation is taken."""
    evals = [r for r in read_metrics(run_dir, "eval") if r.get("stage") in ("ppo", "warm_start")]
    if not evals:
        return None
    e, steps = evals[-1], _planned_steps(run_dir)
    if steps is not None and int(e["step"]) != steps:
        return None
    return e


def warm_start_done(run_dir: str | Path) -> bool:
    """Whether a warm-start run finished: it saved the ``warm_start/`` every arm starts from (a
    warm start stopped part way has only checkpoints) and its closing evaluation is in."""
    return (Path(run_dir) / "warm_start" / "warm_start.json").exists() and final_eval(run_dir) is not None


def _planned_steps(run_dir: str | Path) -> int | None:
    """The RL steps a run was started for (``ppo.steps`` in its ``config.yaml``); None without one."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return None
    return int(((yaml.safe_load(path.read_text()) or {}).get("ppo") or {}).get("steps", 0))


def trained_eval(run_dir: str | Path) -> dict[str, Any] | None:
    """The final evaluation of a run that took its steps (None for a missing dir, or a run that
    stopped before its first step: its last evaluation is the warm start's)."""
    e = final_eval(run_dir)
    return e if e is not None and e.get("stage") == "ppo" else None


def warm_eval(run_dir: str | Path) -> dict[str, Any] | None:
    evals = [r for r in read_metrics(run_dir, "eval") if r.get("stage") == "warm_start"]
    return evals[-1] if evals else None


def run_with_controls(cfg: TrainConfig, *, resume: bool = False,
                      trainer_cls: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Run ``cfg``, then each arm of ``cfg.controls`` from its warm start (an arm whose run
    finished is kept; one with checkpoints is resumed) -> (the main run's summary, the
    comparison lines)."""

    if cfg.controls and not cfg.log.eval_every:
        from agentgym.errors import ConfigError

        raise ConfigError(f"controls={cfg.controls} are compared on their final evaluations, and "
                          "log.eval_every=0 evaluates never; fix: log.eval_every=N (e.g. ppo.steps), "
                          "or controls=[]")
    if trainer_cls is None:
        trainer_cls = Trainer
    main = trainer_cls(cfg, resume=resume)
    if cfg.controls and main.learner.dist is not None:
        from agentgym.errors import ConfigError

        main.close()
        raise ConfigError(f"controls={cfg.controls} under torchrun are not supported: run the arms as "
                          "processes with bench/controls.py, or set controls=[]")
    try:
        summary = main.run()
    finally:
        main.close()
    if not cfg.controls:
        return summary, []
    root = Path(cfg.log.run_dir)
    warm = root / "warm_start"
    if not (warm / "config.json").exists():
        from agentgym.errors import ConfigError

        raise ConfigError(f"controls: {warm} is missing; the arms start from the warm start a run saves "
                          "(sft.steps > 0) or loads (sft.load)")
    src = Path(cfg.sft.load) if cfg.sft.load else warm
    dirs = {}
    for arm in cfg.controls:
        run_dir = root / CONTROLS_DIR / arm
        dirs[arm] = str(run_dir)
        if trained_eval(run_dir) is not None:
            continue
        t = trainer_cls(arm_config(cfg, arm, src, run_dir), resume=latest_checkpoint(run_dir) is not None)
        try:
            t.run()
        finally:
            t.close()
    if cfg.log.plots:
        mine = final_eval(root)
        if mine is not None:
            write_controls_plot(root, warm_eval(root), mine, {a: final_eval(d) for a, d in dirs.items()}, cfg.arm())
    return summary, comparison_lines(str(root), dirs, cfg.arm())


def comparison_lines(main_dir: str, arms: dict[str, str], main_arm: str = "ppo") -> list[str]:
    """This run against each arm on the same held-out problems: success per arm, then the
    paired differences (this run - arm) with standard errors, at the training temperature
    (primary) and greedy (secondary)."""
    mine = final_eval(main_dir)
    ws = warm_eval(main_dir)
    if mine is None:
        return []
    others = {a: final_eval(d) for a, d in arms.items()}
    me = arm_label(main_dir) if main_arm == "ppo" else ARM_NAMES.get(main_arm, main_arm)
    lines = []
    for prefix, what in (("sampled_", "primary"), ("", "secondary")):
        if prefix + "success" not in mine:
            continue
        t = mine.get(prefix + "temperature")
        temp = "greedy" if t == 0 else f"T={t:g}"
        n, k = mine.get(prefix + "problems", "?"), int(mine.get(prefix + "samples", 1))
        size = f"{n} held-out problems" + (f" x {k} samples" if k > 1 else "")
        cells = ([f"warm start {ws[prefix + 'success']:.3f}"] if ws and prefix + "success" in ws else [])
        cells.append(f"{me} {mine[prefix + 'success']:.3f}")
        gaps = []
        for a, r in others.items():
            name = ARM_NAMES.get(a, a)
            if r is None or prefix + "success" not in r:
                cells.append(f"{name} (no result)")
                continue
            cells.append(f"{name} {r[prefix + 'success']:.3f}")
            gaps.append(f"{me} - {name} {fmt_gain(gain(r, mine, prefix))}")
        lines.append(f"controls, {temp} ({what}; {size}; same warm start and seeds): " + " | ".join(cells))
        if gaps:
            lines.append("  " + "; ".join(gaps))
    return lines


def kl_to_warm_start(run_dir: str | Path, *, problems: int = 256, samples: int = 1) -> dict[str, float]:
    """How far a finished arm moved from its warm start: KL(arm || warm start) per policy token,
    on the arm's own episodes.

    The arm's final weights (its latest checkpoint) play the first ``problems`` held-out problems
    of its evaluation, ``samples`` times each, at the rollout temperature; both the arm and its
    KL reference (``RUN_DIR/reference``: the policy as its steps began, the warm start for every
    arm) score those tokens. -> ``kl`` (the mean of k3 = r - 1 - log r, r = warm / arm, over the
    policy tokens: unbiased, what the health monitor's ``kl_ref`` reads on training episodes),
    ``kl_se`` (its standard error over episodes), ``kl_k1`` (the mean log-ratio, also unbiased),
    ``success`` (of those episodes), ``episodes`` and ``tokens``. Paired with the arm's gain, it
    says how much each arm bought per nat.
    """
    import copy
    import tempfile

    import torch

    from agentgym.errors import ConfigError

    run_dir = Path(run_dir)
    if latest_checkpoint(run_dir) is None or not (run_dir / "reference" / "model.safetensors").exists():
        raise ConfigError(f"{run_dir}: expected a finished run dir with a checkpoint and its reference/ "
                          "(what agentgym-train writes); train the arm first")
    d = config_to_dict(load_config(run_dir / "config.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        d["log"].update(run_dir=tmp, progress=False, plots=False, tensorboard=False, wandb=False)
        d["controls"] = []
        cfg = config_from_dict(d)
        t = Trainer(cfg)
        try:
            learner = t.learner
            load_weights(learner.model, run_dir)
            ref = copy.deepcopy(learner.model)
            load_weights(ref, run_dir / "reference")
            ref.eval().requires_grad_(False)
            held, temp = t.rollouts.held, cfg.rollout.temperature
            with learner.compute(), torch.no_grad():
                trajs = collect_fixed(t.rollouts.eval_collector, temperature=temp, sample_seed=54321,
                                      options=t.rollouts.eval_options(), seeds=held.eval_seeds(problems),
                                      samples=samples)
                b = make_batch(trajs, list(range(len(trajs))), pad_id=learner.pad_id).to(learner.device)
                plan = micro_batches(b.lengths, torch.arange(len(b)), cfg.ppo.micro_batch_tokens)
                logp, _ = learner.score_rows(learner.model, b, plan, temperature=temp, values=False)
                ref_logp, _ = learner.score_rows(ref, b, plan, temperature=temp, values=False)
        finally:
            t.log.close()
            t.close()
    mask = b.policy_mask
    per_ep, n_ep = (kl_estimate(logp, ref_logp, "k3") * mask).sum(1).double(), mask.sum(1).double()
    n = float(n_ep.sum())
    kl = float(per_ep.sum()) / n
    se = float(((per_ep - kl * n_ep) ** 2).sum().sqrt()) / n  # of a ratio of sums over episodes
    return {"kl": kl, "kl_se": se, "kl_k1": float(((logp - ref_logp) * mask).sum()) / n,
            "success": sum(episode_success(x.traj) for x in trajs) / len(trajs),
            "episodes": float(len(trajs)), "tokens": n}


# ---------------------------------------------------------------------------- several seeds

def _run(cmd: list[str], run_dir: Path) -> tuple[int, float]:
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(run_dir / "stdout.txt", "a") as out, open(run_dir / "stderr.txt", "a") as err:
        rc = subprocess.run(cmd, stdout=out, stderr=err).returncode
    return rc, time.perf_counter() - t0


def _train_cmd(recipe: str, seed: int, run_dir: Path, overrides: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "agentgym.trainer.cli", "--config", recipe, f"seed={seed}",
            f"log.run_dir={run_dir}", "log.progress=false", "controls=[]", *overrides]


def _start_or_resume(cmd: list[str], run_dir: Path) -> tuple[int, float, bool]:
    """Run ``cmd`` in ``run_dir`` -> (exit status, wall seconds, resumed). A run killed after a
    checkpoint continues from it (``agentgym-train --resume``, exact on CPU: test_resume.py);
    one killed before any checkpoint starts over in a clean dir."""
    if latest_checkpoint(run_dir) is not None:
        return (*_run([sys.executable, "-m", "agentgym.trainer.cli", "--resume", str(run_dir)], run_dir), True)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    return (*_run(cmd, run_dir), False)


def _say_line(msg: str) -> None:
    """One whole line per message (``print`` from several threads can join two on one line)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def run_seeds(recipe: str, seeds: Sequence[int], arms: dict[str, list[str]], out: str | Path, *,
              jobs: int = 1, extra: Sequence[str] = (), warm_extra: Sequence[str] = (),
              say: Callable[[str], None] | None = None,
              after: Callable[[int, str, Path], None] | None = None) -> dict[int, dict[str, Any]]:
    """Per seed: the warm start (``RECIPE seed=S ppo.steps=0``, in ``OUT/seed-S/warm``), then each
    arm (its overrides) from it (``OUT/seed-S/ARM``), as ``agentgym-train`` processes, ``jobs`` at
    a time, seed by seed: a free job takes the first run, in seed order, whose warm start is done,
    so the first seeds finish first. ``extra`` goes to every run, ``warm_extra`` to the warm starts
    only; ``after(seed, name, run_dir)`` runs in the same job once a run has finished (a grid
    evaluation, say). Returns, per seed, ``status`` (``ok``, ``failed warm start`` or ``error
    ...``), the run dirs and the wall time of every process. A run dir that already holds a
    finished run is reused; one killed part way continues from its last checkpoint."""
    root = Path(out)
    res: dict[int, dict[str, Any]] = {s: {"seed": s, "status": "ok", "dirs": {}, "wall": {}} for s in seeds}
    say = say or _say_line
    # a reused warm start is judged by this bench's threshold (the arms check it again on loading)
    min_wellformed = load_config(recipe, [*extra, *warm_extra]).sft.min_wellformed

    def warm(seed: int) -> bool:
        d = root / f"seed-{seed}" / "warm"
        r = res[seed]
        r["dirs"]["warm"] = str(d)
        if warm_start_done(d):
            say(f"seed {seed}: warm start reused from {d}")
        else:
            rc, wall, resumed = _start_or_resume(_train_cmd(recipe, seed, d, [*extra, *warm_extra, "ppo.steps=0"]), d)
            r["wall"]["warm"] = wall
            if rc == FAILED_WARM_START:
                r["status"] = "failed warm start"
            elif rc:
                r["status"] = f"error (exit {rc}; see {d}/stderr.txt)"
            say(f"seed {seed}: warm start{' (resumed)' if resumed else ''} {r['status']} in {wall / 60:.1f} min")
        if r["status"] == "ok" and _failed_warm(d, min_wellformed):
            r["status"] = "failed warm start"
        return r["status"] == "ok"

    def arm(seed: int, name: str) -> bool:
        r = res[seed]
        d = root / f"seed-{seed}" / name
        r["dirs"][name] = str(d)
        if trained_eval(d) is not None:
            say(f"seed {seed}: {name} reused from {d}")
            return True
        cmd = _train_cmd(recipe, seed, d, [*extra, "sft.steps=0", f"sft.load={r['dirs']['warm']}/warm_start",
                                           *arms[name]])
        rc, wall, resumed = _start_or_resume(cmd, d)
        r["wall"][name] = wall
        if rc:
            r.setdefault("arm_errors", {})[name] = f"exit {rc}; see {d}/stderr.txt"
        say(f"seed {seed}: {name}{' (resumed)' if resumed else ''} {'done' if not rc else 'FAILED'} "
            f"in {wall / 60:.1f} min")
        return not rc

    todo = [(s, a) for s in seeds for a in ["warm", *arms]]
    warm_ok: dict[int, bool] = {}
    lock = threading.Condition()

    def next_run() -> tuple[int, str] | None:
        """The first run in seed order that can start now; waits while every one left waits on a
        warm start; None when none is left."""
        with lock:
            while True:
                todo[:] = [(s, a) for s, a in todo if warm_ok.get(s, True)]  # no arms after a failed warm start
                ready = next(((s, a) for s, a in todo if a == "warm" or s in warm_ok), None)
                if ready is not None:
                    todo.remove(ready)
                    return ready
                if not todo:
                    return None
                lock.wait()

    def job() -> None:
        while (run := next_run()) is not None:
            s, a = run
            ok = False
            try:
                ok = warm(s) if a == "warm" else arm(s, a)
                if ok and after is not None:
                    after(s, a, Path(res[s]["dirs"][a]))
            finally:
                with lock:
                    if a == "warm":
                        warm_ok[s] = ok
                    lock.notify_all()

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for f in [pool.submit(job) for _ in range(max(1, jobs))]:
            f.result()
    return res


def _failed_warm(run_dir: Path, min_wellformed: float) -> bool:
    """Did the warm start in ``run_dir`` fail ``sft.min_wellformed`` (its recorded well-formed share)?"""
    rows = read_metrics(run_dir, "warm_start")
    return bool(rows and float(rows[-1].get("wellformed", 0.0)) < min_wellformed)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def arm_stats(run_dir: str) -> dict[str, Any]:
    """Means over a run's steps of the numbers the benches print (mismatch, clipping, alerts)."""

    train = read_metrics(run_dir, "train")

    def m(key: str) -> float:
        return _mean([float(r[key]) for r in train if isinstance(r.get(key), (int, float))])

    return {"steps": len(train), "k3": m("mismatch_k3"), "abs_dlogp": m("mismatch_abs_dlogp_mean"),
            "ess": m("mismatch_ess"), "capped": m("mismatch_capped_frac"), "clip_frac": m("clip_frac"),
            "staleness": m("engine_staleness"), "kl_ref": max((float(r.get("kl_ref", 0.0)) for r in train),
                                                              default=math.nan),
            "alerts": health_summary(train), "t_step": m("t_step")}


def _cell(e: dict[str, Any] | None, prefix: str, pass_at_k: bool = False) -> str:
    key = prefix + (f"pass_at_{int(e.get(prefix + 'samples', 1))}" if pass_at_k and e else "success")
    return f"{e[key]:>6.3f}" if e and key in e else f"{'-':>6}"


def seeds_table(results: dict[int, dict[str, Any]], arms: Sequence[str], base: str, prefix: str, *,
                minus_base: bool = False, pass_at_k: bool = False) -> list[str]:
    """One row per seed: the warm start (as the ``base`` arm evaluated it) and every arm's held-out
    success (``prefix``: ``sampled_`` for the training temperature, ``""`` greedy), then the
    paired difference, its standard error and z on the same problems: ``base`` - each other arm,
    or each other arm - ``base`` with ``minus_base``. ``pass_at_k``: pass@k (k = the samples per
    problem) instead of success."""
    others = [a for a in arms if a != base]
    names = [f"{a} - {base}" if minus_base else f"{base} - {a}" for a in others]
    w = max([10, *(len(a) for a in arms)])
    head = (f"{'seed':>5} {'warm':>6} " + " ".join(f"{a:>{w}}" for a in arms) + " | "
            + " ".join(f"{n:>{max(22, len(n))}}" for n in names))
    lines = [head]
    for seed, r in results.items():
        if r["status"] != "ok":
            lines.append(f"{seed:>5} {r['status']}")
            continue
        finals = {a: trained_eval(r["dirs"][a]) if a in r["dirs"] else None for a in arms}
        ws = (warm_eval(r["dirs"][base]) if finals.get(base) else None) or warm_eval(r["dirs"]["warm"])
        row = (f"{seed:>5} {_cell(ws, prefix, pass_at_k)} "
               + " ".join(f"{_cell(finals[a], prefix, pass_at_k):>{w}}" for a in arms) + " | ")
        gaps = []
        for a in others:
            fa, fb = finals[a], finals[base]
            g = None
            if fa and fb:
                before, after = (fb, fa) if minus_base else (fa, fb)
                g = gain(before, after, prefix, pass_at_k=pass_at_k)
            gaps.append(f"{g['gain']:+.3f}±{g['se']:.3f} ({g['z']:+.1f})" if g else "-")
        lines.append(row + " ".join(f"{x:>{max(22, len(n))}}" for x, n in zip(gaps, names)))
    return lines


# two-sided 95% quantiles of Student's t, by degrees of freedom (above 30: the normal's 1.96 + 2.5 / df)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.96 + 2.5 / df


def between_seeds(xs: Sequence[float]) -> dict[str, float]:
    """Mean of one difference over seeds, its standard error (between seeds), t = mean / SE and
    the 95% interval mean ± t95(n - 1) x SE (n seeds; with one seed the interval is unbounded)."""
    n = len(xs)
    mean = sum(xs) / n if n else math.nan
    se = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n) if n > 1 else math.inf
    half = t95(n - 1) * se
    if n < 2:
        t = math.nan
    else:
        t = mean / se if se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    return {"n": float(n), "mean": mean, "se": se, "t": t, "lo": mean - half, "hi": mean + half}


def seed_differences(results: dict[int, dict[str, Any]], arms: Sequence[str], base: str, prefix: str, *,
                     pass_at_k: bool = False) -> dict[str, dict[int, float]]:
    """Per difference name (``ARM - warm start`` for every arm, ``BASE - ARM`` for every other
    arm) -> seed -> that seed's paired difference on the held-out problems. A seed that failed,
    or an arm that did not finish, is missing from that difference (and reported beside it)."""
    out: dict[str, dict[int, float]] = {}
    for seed, r in results.items():
        if r["status"] != "ok":
            continue
        finals = {a: trained_eval(r["dirs"][a]) if a in r["dirs"] else None for a in arms}
        ws = warm_eval(r["dirs"]["warm"]) if "warm" in r["dirs"] else None
        for a in arms:
            fin = finals[a]
            g = gain(ws, fin, prefix, pass_at_k=pass_at_k) if ws and fin else None
            if g is not None:
                out.setdefault(f"{a} - warm start", {})[seed] = g["gain"]
        for a in arms:
            if a == base:
                continue
            fa, fb = finals[a], finals[base]
            g = gain(fa, fb, prefix, pass_at_k=pass_at_k) if fa and fb else None
            if g is not None:
                out.setdefault(f"{base} - {a}", {})[seed] = g["gain"]
    return out


def between_seed_lines(results: dict[int, dict[str, Any]], arms: Sequence[str], base: str, prefix: str, *,
                       pass_at_k: bool = False) -> list[str]:
    """Across seeds, for every difference of :func:`seed_differences`: each seed's value, then
    the mean, its between-seed SE, t and 95% interval."""
    diffs = seed_differences(results, arms, base, prefix, pass_at_k=pass_at_k)
    seeds = [s for s, r in results.items() if r["status"] == "ok"]
    w = max([22, *(len(k) for k in diffs)])
    lines = [f"{'difference':<{w}} " + " ".join(f"{s:>7}" for s in seeds)
             + f" | {'mean':>7} {'SE':>6} {'t':>6}  95% interval between seeds"]
    for name, per in diffs.items():
        st = between_seeds([per[s] for s in seeds if s in per])
        missing = [str(s) for s in seeds if s not in per]
        interval = (f"[{st['lo']:+.3f}, {st['hi']:+.3f}]" if math.isfinite(st["se"]) else "(one seed: no interval)")
        lines.append(f"{name:<{w}} " + " ".join(f"{per[s]:+7.3f}" if s in per else f"{'-':>7}" for s in seeds)
                     + f" | {st['mean']:+7.3f} {st['se']:6.3f} {st['t']:+6.1f}  {interval}"
                     + (f"  (missing: seed {', '.join(missing)})" if missing else ""))
    return lines
