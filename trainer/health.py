"""Live training health: the failure modes of a PPO run, named while the run is going.

    monitor = HealthMonitor(cfg.health)
    alerts = monitor.check(step, metrics)   # -> ["KL to reference 0.20 > 0.1 at step 17", ...]

Eight checks, each with its threshold in the config (``health.*``), run after every PPO step
on the step's metrics:

* ``kl``: KL to the reference (``kl_ref``, the frozen warm start) above ``max_kl_ref``: the
  policy is running away from where it started (the usual prelude to a collapse).
* ``entropy``: per-token policy entropy above ``max_entropy_ratio`` x its baseline (the mean
  over the first ``window`` steps) and above ``min_entropy`` nats: the policy is falling apart
  into noise (malformed bursts).
* ``grad_norm``: the mean gradient norm (before clipping) of the last ``window`` steps above
  ``max_grad_norm_ratio`` x the baseline and above ``min_grad_norm``: updates getting larger
  and larger.
* ``reward``: from step ``reward_patience`` on, the mean reward of the last ``window`` steps
  is not above the baseline's by ``min_reward_gain``, beyond noise: even the difference plus
  ``reward_z`` standard errors (from the spread of the per-step means in both windows) is not
  above it. The run is falling back, or flat with nothing to learn from. A sampled reward of a
  few tasks a step swings from step to step; compared raw (``reward_z=0``), two windows of 5
  steps disagree by chance in most runs.
* ``saturated``: the mean reward of the last ``window`` steps is at most ``reward_low`` (almost
  nothing succeeds: a group baseline then gives zero advantages and there is nothing to learn
  from; the warm start is too weak or the task too hard) or at least ``reward_high`` (almost
  everything succeeds: nothing left to learn). The alert says which, and what to change.
* ``mismatch``: the engine that sampled and the learner disagree on the sampled tokens:
  ``mismatch_k3`` (k3 estimate of KL(engine || learner)) above ``max_mismatch_k3`` or the mean
  |log pi_learner - log pi_engine| above ``max_mismatch_abs_dlogp``. Kernels and precision
  give ~1e-5 (same weights, float32) to ~1e-2 (a bfloat16 engine); a stale engine adds the
  policy's own drift. Far above that, the behaviour log-probs come from the wrong weights,
  the wrong temperature or a broken engine, and correction cannot fix it.
* ``ess``: the effective sample size of the correction weights (``mismatch_ess``, in (0, 1])
  below ``min_ess``: a few tokens carry the update.
* ``capped``: the share of policy tokens whose correction weight sits at the cap C or was
  masked (``mismatch_capped_frac``) above ``max_capped_frac``: the correction is saturated; a
  uniform weight C reweights nothing.

An alert is a short sentence naming the metric, its value, the bound and the step. The
trainer shows the latest alerts in the progress line, prints each new kind once above it,
and logs ``health_alerts`` (the sentences) and ``health_<check>`` (0/1) with the step's
metrics; :func:`health_summary` condenses a run's alerts for the final report.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

__all__ = ["CHECKS", "KL_UNWATCHED", "LABELS", "HealthConfig", "HealthMonitor", "health_summary"]


KL_UNWATCHED = ("KL to the reference not watched (ppo.kl_coef=0 keeps no reference model; "
                "health.watch_kl=true keeps one for the check)")


@dataclass
class HealthConfig:
    enabled: bool = True
    """Check the run's health after every PPO step (alerts in the progress line and metrics)."""
    window: int = 5
    """Steps averaged for the baseline (the first ones) and for the recent grad-norm/reward."""
    max_kl_ref: float = 0.1
    """Alert when the KL to the reference policy exceeds this (nats per policy token; ``kl_ref``,
    the k3 estimate on the step's episodes, whatever ``ppo.kl_estimator`` the loss uses)."""
    watch_kl: bool = False
    """Keep the frozen reference for the KL check even when the loss does not need it
    (``ppo.kl_coef: 0``): one more forward pass a step, and the reference's memory. Without it
    such a run logs no ``kl_ref``, and it says so when it starts and in its last lines."""
    max_entropy_ratio: float = 2.0
    """Alert when the entropy exceeds this multiple of its baseline..."""
    min_entropy: float = 0.3
    """...and this absolute value (nats per token): a tiny baseline doubling is not a blow-up."""
    max_grad_norm_ratio: float = 3.0
    """Alert when the recent mean gradient norm exceeds this multiple of its baseline..."""
    min_grad_norm: float = 0.1
    """...and this value (a group baseline gives zero gradients when every sample of every
    task scores the same, so a baseline can be tiny)."""
    reward_patience: int = 10
    """First step at which a reward that has not risen is an alert."""
    min_reward_gain: float = 0.0
    """The recent mean reward must beat the baseline's by more than this..."""
    reward_z: float = 3.0
    """...give or take this many standard errors of the difference (0: the raw means). At 3, a
    20-step run whose reward does not change raises it in ~5% of runs (0: 84%)."""
    reward_low: float = 0.05
    """Alert when the mean reward of the last ``window`` steps is at most this (near 0: the warm
    start is too weak, or the task too hard, for the policy to find a reward to learn from)..."""
    reward_high: float = 0.95
    """...or at least this (near 1: the policy already solves the task; nothing left to learn)."""
    max_mismatch_k3: float = 0.05
    """Alert when the engine-vs-learner k3 (KL(engine || learner) per policy token) exceeds this."""
    max_mismatch_abs_dlogp: float = 0.2
    """Alert when the mean |log pi_learner - log pi_engine| over sampled tokens exceeds this."""
    min_ess: float = 0.5
    """Alert when the correction weights' effective sample size (share of tokens, (0, 1]) is below this."""
    max_capped_frac: float = 0.2
    """Alert when more than this share of policy tokens has its correction weight at the cap or masked."""

    def validate(self) -> None:
        if self.window < 1:
            raise ConfigError(f"health.window: expected >= 1 step, got {self.window}")
        if self.reward_patience < 2 * self.window:
            raise ConfigError(f"health.reward_patience: expected >= 2 x health.window = "
                              f"{2 * self.window} (a baseline and a recent window that do not "
                              f"overlap), got {self.reward_patience}")
        for key in ("max_kl_ref", "max_entropy_ratio", "max_grad_norm_ratio", "max_mismatch_k3",
                    "max_mismatch_abs_dlogp"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"health.{key}: expected a positive number, got {getattr(self, key)!r}")
        if not self.reward_z >= 0:
            raise ConfigError(f"health.reward_z: expected a number of standard errors >= 0, got {self.reward_z!r}")
        if not 0 <= self.reward_low < self.reward_high <= 1:
            raise ConfigError(f"health.reward_low and health.reward_high: expected 0 <= reward_low < reward_high "
                              f"<= 1, got {self.reward_low!r} and {self.reward_high!r}")
        for key in ("min_ess", "max_capped_frac"):
            if not 0 <= getattr(self, key) <= 1:
                raise ConfigError(f"health.{key}: expected a share in [0, 1], got {getattr(self, key)!r}")


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


class HealthMonitor:
    """Keeps the series it needs and returns the alerts of each step (see the module doc)."""

    def __init__(self, cfg: HealthConfig) -> None:
        self.cfg = cfg
        self.series: dict[str, list[float]] = {"kl_ref": [], "entropy": [], "grad_norm": [],
                                               "reward_mean": []}
        self.now: dict[str, Any] = {}  # the step being checked (the per-step checks read it)

    def check(self, step: int, metrics: dict[str, Any]) -> list[str]:
        """Record ``metrics`` of PPO step ``step`` (1-based) and return this step's alerts."""
        if not self.cfg.enabled:
            return []
        self.now = metrics
        for key, xs in self.series.items():
            v = metrics.get(key)
            if isinstance(v, (int, float)):
                xs.append(float(v))
        return [a for fn in CHECKS.values() if (a := fn(self, step)) is not None]

    def flags(self, alerts: list[str]) -> dict[str, int]:
        """``health_<check>``: 1 when that check fired this step (the metrics' numeric form)."""
        return {f"health_{name}": int(any(a.startswith(LABELS[name]) for a in alerts)) for name in CHECKS}

    # ------------------------------------------------------------------ the checks
    def _baseline(self, key: str) -> float | None:
        xs = self.series[key]
        return _mean(xs[: self.cfg.window]) if len(xs) >= self.cfg.window else None

    def _kl(self, step: int) -> str | None:
        xs = self.series["kl_ref"]
        if xs and xs[-1] > self.cfg.max_kl_ref:
            return f"{LABELS['kl']} {xs[-1]:.3g} > {self.cfg.max_kl_ref:g} at step {step}"
        return None

    def _entropy(self, step: int) -> str | None:
        base, xs = self._baseline("entropy"), self.series["entropy"]
        if base is None or len(xs) <= self.cfg.window:
            return None
        bound = max(self.cfg.max_entropy_ratio * base, self.cfg.min_entropy)
        if xs[-1] > bound:
            return (f"{LABELS['entropy']} {xs[-1]:.3g} > {bound:.3g} ({self.cfg.max_entropy_ratio:g}x "
                    f"its first-{self.cfg.window}-step mean {base:.3g}) at step {step}")
        return None

    def _grad_norm(self, step: int) -> str | None:
        base, xs = self._baseline("grad_norm"), self.series["grad_norm"]
        w = self.cfg.window
        if base is None or len(xs) < 2 * w:
            return None
        recent = _mean(xs[-w:])
        bound = max(self.cfg.max_grad_norm_ratio * base, self.cfg.min_grad_norm)
        if recent > bound:
            return (f"{LABELS['grad_norm']} {recent:.3g} (mean of the last {w} steps) > {bound:.3g} "
                    f"({self.cfg.max_grad_norm_ratio:g}x its first-{w}-step mean {base:.3g}) at step {step}")
        return None

    def _reward(self, step: int) -> str | None:
        xs, w = self.series["reward_mean"], self.cfg.window
        if step < self.cfg.reward_patience or len(xs) < 2 * w:
            return None
        first, last = xs[:w], xs[-w:]
        gain = _mean(last) - _mean(first)
        # Welch's standard error of the difference of the two window means (0 for one-step windows)
        se = math.sqrt((statistics.variance(first) + statistics.variance(last)) / w) if w > 1 else 0.0
        z, floor = self.cfg.reward_z, self.cfg.min_reward_gain
        if gain + z * se <= floor:
            noise = f" ± {se:.3f}, at most {gain + z * se:+.3f} at {z:g} SE" if z and se else ""
            return (f"{LABELS['reward']}: mean {_mean(last):.3f} over the last {w} steps against "
                    f"{_mean(first):.3f} over the first {w} ({gain:+.3f}{noise}; bound {floor:+g}) at step {step}")
        return None

    def _saturated(self, step: int) -> str | None:
        xs, w = self.series["reward_mean"], self.cfg.window
        if len(xs) < w:
            return None
        mean = _mean(xs[-w:])
        if mean <= self.cfg.reward_low:
            return (f"{LABELS['saturated']} near 0: mean {mean:.3f} over the last {w} steps (<= "
                    f"{self.cfg.reward_low:g}) at step {step}. Almost no episode succeeds, so there is almost "
                    "nothing to learn from: the warm start is too weak (more sft.steps, or a higher "
                    "sft.stop_pass_at_k) or the task too hard for it (an easier curriculum level)")
        if mean >= self.cfg.reward_high:
            return (f"{LABELS['saturated']} near 1: mean {mean:.3f} over the last {w} steps (>= "
                    f"{self.cfg.reward_high:g}) at step {step}. Almost every episode succeeds, so there is "
                    "little left to learn: a harder task or curriculum level, or the run is done")
        return None

    def _value(self, key: str) -> float | None:
        v = self.now.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def _mismatch(self, step: int) -> str | None:
        k3, dl = self._value("mismatch_k3"), self._value("mismatch_abs_dlogp_mean")
        over = []
        if k3 is not None and k3 > self.cfg.max_mismatch_k3:
            over.append(f"k3 {k3:.3g} > {self.cfg.max_mismatch_k3:g}")
        if dl is not None and dl > self.cfg.max_mismatch_abs_dlogp:
            over.append(f"mean |dlogp| {dl:.3g} > {self.cfg.max_mismatch_abs_dlogp:g}")
        if over:
            return f"{LABELS['mismatch']}: {', '.join(over)} at step {step}"
        return None

    def _ess(self, step: int) -> str | None:
        ess = self._value("mismatch_ess")
        if ess is not None and ess < self.cfg.min_ess:
            return f"{LABELS['ess']} {ess:.3g} < {self.cfg.min_ess:g} at step {step}"
        return None

    def _capped(self, step: int) -> str | None:
        frac = self._value("mismatch_capped_frac")
        if frac is not None and frac > self.cfg.max_capped_frac:
            return (f"{LABELS['capped']} {frac:.3g} > {self.cfg.max_capped_frac:g} of policy tokens "
                    f"at step {step}")
        return None


LABELS: dict[str, str] = {"kl": "KL to reference", "entropy": "entropy",
                          "grad_norm": "grad norm rising", "reward": "reward not increasing",
                          "saturated": "reward saturated",
                          "mismatch": "engine/learner mismatch", "ess": "correction ESS",
                          "capped": "correction weights capped or masked on"}
# check name -> method; a check returns its alert sentence or None
CHECKS = {"kl": HealthMonitor._kl, "entropy": HealthMonitor._entropy,
          "grad_norm": HealthMonitor._grad_norm, "reward": HealthMonitor._reward,
          "saturated": HealthMonitor._saturated,
          "mismatch": HealthMonitor._mismatch, "ess": HealthMonitor._ess, "capped": HealthMonitor._capped}


def health_summary(train_rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Check name -> the PPO steps at which it fired, from a run's ``train`` metrics rows."""
    out: dict[str, list[int]] = {}
    for r in train_rows:
        for name in CHECKS:
            if r.get(f"health_{name}"):
                out.setdefault(name, []).append(int(r["step"]))
    return out
