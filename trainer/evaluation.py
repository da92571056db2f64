"""Evaluation on held-out problems, paired comparisons, and the run's closing report.

An evaluation plays the same held-out problems every time (``rollout/heldout.py``: distinct task ids
of the eval split), with fixed sampling seeds:

* at the training temperature (``sampled_`` keys; the primary number: the policy as it is
  trained and sampled), ``samples`` episodes per problem in the warm-start and final
  evaluations, so ``pass@k`` (k <= samples) comes with it;
* at ``log.eval_temperature`` (plain keys; greedy by default: the secondary number).

Its record (one ``eval`` row of ``metrics.jsonl``) holds ``success`` with a 95% interval
(``success_lo``/``success_hi``: :func:`agentgym.scores.wilson`; with several samples per problem at the effective
sample size of the per-problem means, since samples of one problem are correlated), ``problems``, ``samples``, ``episodes``, ``pass_at_K``,
``wellformed`` (share of episodes whose tool loop is well formed, :func:`episode_wellformed`),
``problems_hash`` (digest of the problem list) and ``outcomes``, the per-episode results as a
string of 0/1, problem-major, with ``-`` for an episode lost to an infrastructure fault (neither
a success nor a failure), so that two evaluations of the same problems are compared problem by
problem (:func:`gain`: a paired difference with its standard error, over the problems both
evaluations scored).

:func:`report_lines` is what ``agentgym-train`` prints at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import WarmStartFailed
from agentgym.scores import wilson

from .algo.episode import Episode
from .config import config_from_dict
from .health import KL_UNWATCHED, LABELS, health_summary
from .learner import WARM_START
from .metrics import Progress, episode_stats, episode_success, read_metrics
from .rollout.collector import drop_infra
from .rollout.heldout import problems_hash
from .rollout.ray_collector import drop_failed
from .stats import ARM_NAMES, _chunks, _se, gain, pass_at_k, per_problem

__all__ = ["STAGE_NAMES", "Evaluator", "arm_label", "collect_fixed", "episode_wellformed", "eval_record",
           "ratio_moved", "report_lines", "update_line"]

STAGE_NAMES = {"init": "untrained", "warm_start": "warm start", "ppo": "after {arm}"}


def collect_fixed(collector: Any, problems: int | None = None, *, temperature: float, sample_seed: int,
                  options: Any = None, seed_base: int = 0, seeds: Sequence[int] | None = None,
                  samples: int = 1, on_chunk: Callable[[int], None] | None = None) -> list[Episode]:
    """Play each problem seed ``samples`` times (problem-major: seed 0's samples first), in
    chunks of the collector's pool: ``problems x samples`` episodes. ``seeds`` default:
    ``seed_base .. seed_base + problems - 1``.

    Chunk ``c`` samples with ``sample_seed + c``: the same problems and the same random numbers
    every time, so two sets of weights are compared on identical conditions. ``on_chunk(n)``
    is told the episodes done so far after each chunk (progress).
    """
    if seeds is None:
        seeds = [seed_base + i for i in range(problems or 0)]
    order = [s for s in seeds for _ in range(samples)]
    chunk = len(collector.pool)
    out: list[Episode] = []
    for c, start in enumerate(range(0, len(order), chunk)):
        got, _ = collector.collect(order[start:start + chunk], temperature=temperature,
                                   sample_seed=sample_seed + c, options=options)
        out += got
        if on_chunk is not None:
            on_chunk(len(out))
    return out


def episode_wellformed(traj: Any, needs_tool: bool) -> bool:
    """The episode went through the env's loop as meant: every action parsed and every tool call
    succeeded (no turn with an error), a tool was called if the env has tools, and it ended
    with a final answer (terminated, not cut by a budget). Right or wrong answer alike."""
    turns = traj.turns
    return (bool(turns) and traj.terminated and not any(u.error for u in turns)
            and (not needs_tool or any(u.tool for u in turns)))


def eval_record(episodes: Sequence[Episode], temperature: float, prefix: str = "", *, samples: int = 1,
                needs_tool: bool = False, task_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Episode statistics of one evaluation (module doc), ``samples`` consecutive episodes per
    problem. Episodes lost to the infrastructure (``Episode.lost``: a dead sandbox, a Ray worker)
    keep their place in ``outcomes`` (as ``-``) and count nowhere else."""

    kept = [e.traj for e in episodes if not e.lost]
    ok = [episode_success(t) for t in kept]
    outcomes = "".join("-" if e.lost else "1" if episode_success(e.traj) else "0" for e in episodes)
    n_prob = len(episodes) // max(samples, 1)
    means = [x for x in per_problem(outcomes, samples) if x is not None]
    mean = sum(ok) / len(ok) if ok else 0.0
    if samples == 1:
        lo, hi = wilson(mean, len(ok))
    else:  # Wilson at the effective sample size of the per-problem means (samples are clustered)
        se = _se(means)
        n_eff = min(float(len(ok)), mean * (1 - mean) / se**2) if se > 0 else float(len(means))
        lo, hi = wilson(mean, n_eff)
    m: dict[str, Any] = {**episode_stats(kept), "success": mean, "success_lo": lo, "success_hi": hi,
                         "episodes": len(ok), "problems": n_prob, "samples": samples,
                         "temperature": temperature,
                         "wellformed": sum(episode_wellformed(t, needs_tool) for t in kept) / max(len(ok), 1),
                         "outcomes": outcomes}
    chunks = [c.replace("-", "") for c in _chunks(outcomes, samples)]
    for k in sorted({1, *(2**i for i in range(1, 8) if 2**i < samples), samples}):
        full = [c for c in chunks if len(c) >= k]  # a problem with fewer than k scored samples has no pass@k
        m[f"pass_at_{k}"] = sum(pass_at_k(len(c), c.count("1"), k) for c in full) / max(len(full), 1)
    if task_ids is not None:
        m["problems_hash"] = problems_hash(list(task_ids))
    return {prefix + k: v for k, v in m.items()}


def _stages(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> its latest evaluation row (``ppo``: the final one)."""
    return {r.get("stage", "ppo"): r for r in rows if r["phase"] == "eval"}


def _run_config(run_dir: str) -> Any:
    import yaml

    p = Path(run_dir) / "config.yaml"
    if not p.exists():
        return None

    try:
        return config_from_dict(yaml.safe_load(p.read_text()) or {})
    except Exception:  # an old or foreign config: the report still prints
        return None


def _run_arm(run_dir: str) -> str:
    cfg = _run_config(run_dir)
    return "ppo" if cfg is None else str(cfg.arm())


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
    arm = arm_label(run_dir, rows)
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
    if train and (upd := update_line(train)):
        lines.append(upd)
    if train:
        fired = health_summary(train)
        unwatched = _run_arm(run_dir) in ("ppo", "placebo") and not any("kl_ref" in r for r in train)
        lines.append("health: " + ("; ".join(f"{LABELS[k]} at step(s) {', '.join(map(str, v))}"
                                            for k, v in fired.items()) if fired else "no alerts")
                     + f" in {len(train)} steps" + (f"; {KL_UNWATCHED}" if unwatched else ""))
    if lines:
        lines.append(f"run dir: {run_dir}")
    return lines


def _updated(train: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in train if isinstance(r.get("ratio_max"), (int, float))]


def ratio_moved(train: Sequence[dict[str, Any]]) -> bool:
    """Did the importance ratio of any PPO update leave exactly 1? With one epoch, one
    minibatch and the engine sampling the learner's own weights it cannot (the old log-probs are
    the update's own pass), so the clip never acts and the update is a plain policy gradient."""
    return any(r["ratio_max"] != 1.0 or r["ratio_min"] != 1.0 for r in _updated(train))


def arm_label(run_dir: str, rows: Sequence[dict[str, Any]] | None = None) -> str:
    """The arm's name for what it computed: ``PPO`` only when its ratio moved; a PPO arm whose
    ratio stayed exactly 1 is ``REINFORCE`` (``on successes`` with no baseline: the 0/1 score is
    the advantage, so only successful episodes push)."""
    cfg = _run_config(run_dir)
    arm = "ppo" if cfg is None else str(cfg.arm())
    if arm != "ppo":
        return ARM_NAMES.get(arm, arm)
    train = [r for r in (read_metrics(run_dir) if rows is None else rows) if r["phase"] == "train"]
    if not _updated(train) or ratio_moved(train):
        return "PPO"
    no_baseline = cfg is not None and cfg.ppo.advantage != "gae" and cfg.ppo.baseline_scale == 0
    return "REINFORCE on successes" if no_baseline else "REINFORCE"


def update_line(train: Sequence[dict[str, Any]]) -> str | None:
    """What a policy-gradient arm's updates did: the ratio's range, the clipped share of tokens,
    the share with a negative advantage, the correction weights' range and capped share."""
    upd = _updated(train)
    if not upd:
        return None

    def mean(key: str) -> float | None:
        xs = [float(r[key]) for r in upd if isinstance(r.get(key), (int, float))]
        return sum(xs) / len(xs) if xs else None

    lo, hi = min(float(r["ratio_min"]) for r in upd), max(float(r["ratio_max"]) for r in upd)
    parts = [f"ratio range [{lo:.4f}, {hi:.4f}]", f"clipped {mean('clip_frac') or 0.0:.2%} of tokens"]
    if (neg := mean("adv_neg_frac")) is not None:
        parts.append(f"negative advantage on {neg:.1%} of tokens")
    w = [r for r in upd if isinstance(r.get("mismatch_w_min"), (int, float))]
    if w:
        parts.append(f"correction weights [{min(float(r['mismatch_w_min']) for r in w):.4f}, "
                     f"{max(float(r['mismatch_w_max']) for r in w):.4f}], "
                     f"{mean('mismatch_capped_frac') or 0.0:.1%} capped")
    what = ("PPO: the ratio moved" if ratio_moved(train) else
            "not PPO: the ratio stayed exactly 1, so the clip never acted; a plain on-policy policy gradient")
    return f"update ({len(upd)} steps; {what}): " + ", ".join(parts)


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


class Evaluator:
    """A run's evaluations: the held-out problems (``rollout/heldout.py``) at ``log.eval_temperature``
    and, with ``log.eval_sampled``, at the rollout temperature; the warm start's stopping check
    and its verdict. Under torchrun the rollout groups split the problems."""

    def __init__(self, cfg: Any, learner: Any, rollouts: Any, log: Any) -> None:
        self.cfg, self.learner, self.rollouts, self.log = cfg, learner, rollouts, log
        self.held = rollouts.held

    def evaluate(self, stage: str, step: int, *, full: bool = False) -> dict[str, Any]:
        """Evaluate the current policy, log it (phase ``eval``) -> its record. ``stage``:
        ``init`` (before the warm start), ``warm_start`` (right after it) or ``ppo`` (any arm's
        steps). ``full``: the warm start and the end, which the report compares, use
        ``log.eval_episodes_final`` problems and ``log.eval_samples`` samples each."""

        cfg, learner, ranks = self.cfg, self.learner, self.learner.ranks
        n = (cfg.log.eval_episodes_final or cfg.log.eval_episodes) if full else cfg.log.eval_episodes
        seeds, ids = self.held.eval_seeds(n), self.held.eval_ids(n)
        mine = ranks.share(len(seeds))
        runs = [("", cfg.log.eval_temperature, 1)]
        if cfg.log.eval_sampled:
            runs.append(("sampled_", cfg.rollout.temperature, cfg.log.eval_samples if full else 1))
        m: dict[str, Any] = {"stage": stage}
        for prefix, temperature, samples in runs:
            what = STAGE_NAMES.get(stage, stage).format(arm=ARM_NAMES.get(cfg.arm(), cfg.arm()))
            bar = Progress(len(mine) * samples, f"eval {what} T={temperature:g}", cfg.log.progress and ranks.main)
            try:
                with learner.compute():
                    episodes = collect_fixed(self.rollouts.eval_collector, temperature=temperature,
                                             sample_seed=12345 + mine.start * samples,
                                             options=self.rollouts.eval_options(), seeds=[seeds[i] for i in mine],
                                             samples=samples, on_chunk=bar.update)
            finally:
                bar.close()
            kept, _, _ = drop_failed(episodes, list(range(len(episodes))))  # lost with a Ray worker
            _, _, infra = drop_infra(kept, list(range(len(kept))))  # no outcome: not a failure either
            if ranks.tp_follower:
                episodes, infra = [], 0  # the other ranks of this engine hold the same episodes
            m.update(eval_record(ranks.gather(episodes), temperature, prefix, samples=samples,
                                 needs_tool=self.held.needs_tool, task_ids=ids))
            m[prefix + "episodes_infra"] = ranks.sum(infra)
        self.log.log("eval", step, m)
        return m

    def sft_check(self, step: int) -> dict[str, float]:
        """The warm start's held-out stopping check: pass@1 and pass@k at ``sft.check_temperature``
        (default: the training temperature) on the check problems (none of them an evaluation
        problem)."""
        cfg, k = self.cfg, self.cfg.sft.check_samples
        t = cfg.rollout.temperature if cfg.sft.check_temperature is None else cfg.sft.check_temperature
        trajs = collect_fixed(self.rollouts.eval_collector, temperature=t, sample_seed=777_000,
                              options=self.rollouts.eval_options(), seeds=self.held.check_seeds, samples=k)
        rec = eval_record(trajs, t, samples=k, needs_tool=self.held.needs_tool)
        return {"pass_at_1": rec["pass_at_1"], f"pass_at_{k}": rec[f"pass_at_{k}"], "wellformed": rec["wellformed"]}

    def held_out_record(self) -> dict[str, Any]:
        """What the run evaluates on, and how it is kept out of training (phase ``held_out``)."""
        e, held = self.cfg.env, self.held
        how = f"split {e.eval_split!r}, training on {e.train_split!r}" if held.splits else "no splits"
        if held.exclude:
            how += "; the trainer keeps them out of training"
        if self.cfg.log.eval_seed_start:
            how += (f"; from seed {self.cfg.log.eval_seed_start}, "
                    + ("none of them a problem a run from seed 0 evaluates on" if held.skipped_tuning
                       else "the split is too small to skip the problems a run from seed 0 evaluates on"))
        return {"eval_problems": len(held.eval), "check_problems": len(held.check), "how": how,
                "needs_tool": held.needs_tool}

    # ------------------------------------------------------------------ the warm start's verdict
    def warm_start_verdict(self, ev: dict[str, Any], *, steps: int | None, stop_reason: str | None,
                           loaded_from: str | None = None) -> dict[str, Any]:
        """The warm start's record (phase ``warm_start``; saved as warm_start/warm_start.json):
        did its tool loop learn (``sft.min_wellformed`` of its held-out episodes at the training
        temperature well formed)?"""

        cfg = self.cfg
        key = "sampled_wellformed" if "sampled_wellformed" in ev else "wellformed"
        wellformed = float(ev.get(key, 0.0))
        rec = {"teacher": cfg.sft.teacher, "steps": steps, "stop_reason": stop_reason,
               "wellformed": wellformed, "min_wellformed": cfg.sft.min_wellformed,
               "failed": wellformed < cfg.sft.min_wellformed, "loaded_from": loaded_from}
        self.log.log("warm_start", 0, rec)
        warm = Path(cfg.log.run_dir) / WARM_START
        if loaded_from is None and self.learner.ranks.main and warm.exists():
            (warm / "warm_start.json").write_text(json.dumps({**rec, "eval": ev, "eval_spec": self.spec()}, indent=1))
        return rec

    def check_warm_start(self, rec: dict[str, Any]) -> None:
        """Raise :class:`WarmStartFailed` when the verdict says the tool loop did not learn."""

        if rec["failed"]:
            raise WarmStartFailed(
                f"the warm start's tool loop did not learn: {rec['wellformed']:.2f} of its held-out episodes "
                f"at T={self.cfg.rollout.temperature:g} are well formed, below sft.min_wellformed="
                f"{rec['min_wellformed']:g}. This seed counts as failed (nothing was trained after it); "
                f"inspect {Path(self.cfg.log.run_dir) / WARM_START}, or change the warm start "
                "(sft.steps, sft.lr, sft.check_*)")

    def spec(self) -> dict[str, Any]:
        """What a warm-start evaluation depends on besides the weights: reused across arms only
        when these agree."""
        import dataclasses

        cfg, r = self.cfg, self.cfg.rollout
        n = cfg.log.eval_episodes_final or cfg.log.eval_episodes
        return {"problems": self.held.eval_ids(n), "samples": cfg.log.eval_samples,
                "temperature": r.temperature, "eval_temperature": cfg.log.eval_temperature,
                "eval_sampled": cfg.log.eval_sampled, "engine": r.engine, "engine_kwargs": r.engine_kwargs,
                "engine_weights": r.engine_weights, "engine_dtype": r.engine_dtype,
                "model_dtype": cfg.model.dtype, "device": cfg.model.device, "env": dataclasses.asdict(cfg.env)}

    def load_warm_start(self, step: int) -> dict[str, Any]:
        """``sft.load``: log the saved warm start's evaluation as this run's (when it was made
        under the same evaluation spec; else evaluate again) and its verdict."""
        path = Path(str(self.cfg.sft.load))
        saved = json.loads((path / "warm_start.json").read_text()) if (path / "warm_start.json").exists() else {}
        if saved.get("eval_spec") == json.loads(json.dumps(self.spec())):
            ev = {**saved["eval"], "loaded_from": str(path)}
            self.log.log("eval", step, ev)
        else:
            ev = self.evaluate("warm_start", step, full=True)
        return self.warm_start_verdict(ev, steps=saved.get("steps"), stop_reason=saved.get("stop_reason"),
                                       loaded_from=str(path))
