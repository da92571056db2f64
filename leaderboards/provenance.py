"""``agentgym leaderboard verify --model PATH``: were these actions sampled from these weights?

Replay proves that the recorded actions earn the recorded scores; it cannot say which policy
chose them. For an open-weight entry the verifier can: it re-scores a random sample of the
verified episodes under the named model, teacher-forced (one forward pass per episode through
the trainer's :func:`~agentgym.trainer.model.logprobs.policy_forward`, on CPU for small models), and
applies two tests to the policy's tokens:

1. **Recorded log-probs** (engines record the log-prob of every token they sample): each
   episode's mean ``|recorded - recomputed|`` must be at most ``tolerance`` (default
   :data:`LOGPROB_TOL` nats; float32 on CPU agrees to ~1e-5, bf16 engines to a few 1e-2).
2. **Likelihood of the sampled tokens** (needs nothing recorded): a token sampled from the model
   has, on average, log-prob ``-H`` (minus the entropy of the distribution it came from). Over
   the sampled tokens, ``d_t = log p(x_t) + H_t`` has mean 0 under the model; tokens chosen by
   another policy are less likely under it than its own samples, and the mean of ``d_t`` falls
   below 0. The entry is rejected when the one-sided t statistic of ``d_t`` is below
   ``-LIKELIHOOD_Z`` (:data:`LIKELIHOOD_Z` = 5: a false alarm is a ~3e-7 event for independent
   tokens; tokens of one episode are correlated, which is why the bar is far out).

What it proves: the sampled actions are typical samples of these weights at the declared
temperature, and the recorded log-probs are these weights' (so they were not invented to pass
the copied-trials rule). What it does not prove: that *every* episode came from the model (only
the sample is checked: a file mixing a few foreign episodes among many genuine ones passes with a
probability that falls with the sample size); that the declared *seeds* were used (sampling seeds
are not recoverable from tokens); that the file holds the first run rather than the best of
several runs of the same model (best-of-N selection keeps every episode a genuine sample); or
anything about closed models, whose weights no verifier has. Greedy entries (temperature 0) are
checked on the recorded log-probs only: their tokens are not samples.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError

__all__ = ["LIKELIHOOD_Z", "LOGPROB_TOL", "Provenance", "check_provenance"]

LOGPROB_TOL = 0.05  # nats: mean |recorded - recomputed| per episode
LIKELIHOOD_Z = 5.0
DEFAULT_SAMPLE = 16  # episodes re-scored


@dataclass
class Provenance:
    """The outcome of :func:`check_provenance` (``problems`` empty when the actions are the model's)."""

    model: str
    weights_sha256: str | None
    seed: int
    episodes: int = 0
    tokens: int = 0
    mean_abs_dlogp: float | None = None  # over the sampled tokens that had a recorded log-prob
    max_episode_dlogp: float | None = None  # the worst episode's mean |dlogp|
    likelihood_z: float | None = None  # t statistic of log p + H (None for greedy entries)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        parts = [f"{self.episodes} episodes, {self.tokens} action tokens re-scored under {self.model}"
                 f" (sample seed {self.seed})"]
        if self.mean_abs_dlogp is not None:
            parts.append(f"mean |dlogp| {self.mean_abs_dlogp:.2e} (worst episode {self.max_episode_dlogp:.2e}, "
                         f"tolerance {LOGPROB_TOL})")
        if self.likelihood_z is not None:
            parts.append(f"likelihood t {self.likelihood_z:+.2f} (rejected below -{LIKELIHOOD_Z:g})")
        return "provenance " + ("CHECKED" if self.ok else "FAILED") + ": " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "weights_sha256": self.weights_sha256, "seed": self.seed,
                "episodes": self.episodes, "tokens": self.tokens, "mean_abs_dlogp": self.mean_abs_dlogp,
                "max_episode_dlogp": self.max_episode_dlogp, "likelihood_z": self.likelihood_z, "ok": self.ok}


def check_provenance(report: Any, model: str, *, sample: int = DEFAULT_SAMPLE, seed: int | None = None,
                     tolerance: float = LOGPROB_TOL, device: str = "cpu") -> Provenance:
    """Re-score a random sample of ``report``'s verified episodes under ``model`` (a model dir, a
    run dir or a checkpoint) and test them (module doc)."""
    import torch

    from agentgym.leaderboards.engine_policy import resolve_model_dir, weights_digest
    from agentgym.trainer.model.gptoss import load_policy
    from agentgym.trainer.model.logprobs import policy_forward

    if sample < 1:
        raise ConfigError(f"--sample must be at least 1, got {sample}")
    model_dir = resolve_model_dir(model)
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    prov = Provenance(model, weights_digest(model_dir), seed)
    describe = report.header.get("submission", {}).get("describe", {})
    temp = describe.get("temperature")
    greedy = temp is None or temp == 0
    net = load_policy(model_dir, device=device, dtype=torch.float32)
    config: Any = net.config
    vocab = int(config.vocab_size)
    episodes = sorted(report.episodes, key=lambda r: r.line)
    chosen = random.Random(seed).sample(episodes, min(sample, len(episodes)))
    d_all: list[float] = []  # log p(x_t) + H_t over every sampled token
    worst = 0.0
    abs_sum, abs_n = 0.0, 0
    for r in sorted(chosen, key=lambda r: r.line):
        t = r.truth
        if max(t.tokens) >= vocab:
            prov.problems.append(f"line {r.line}: {r.spec.label}: token id {max(t.tokens)} is outside the model's "
                                 f"vocabulary of {vocab}: not this model's tokens")
            continue
        ids = torch.tensor([t.tokens], dtype=torch.long, device=device)  # (1, T)
        mask = torch.tensor([t.policy_mask], dtype=torch.bool, device=device)  # (1, T): the policy's tokens
        with torch.no_grad():
            out = policy_forward(net, ids, torch.ones_like(ids), temperature=1.0 if greedy else float(temp),
                                 score_mask=mask)
        pos = [i for i, m in enumerate(t.policy_mask) if m]
        lp = out.logprobs[0, pos].double().tolist()
        ent = out.entropy[0, pos].double().tolist()
        prov.episodes += 1
        prov.tokens += len(pos)
        d_all += [a + h for a, h in zip(lp, ent)]
        recorded = [r.record["trajectory"]["logprobs"][i] for i in pos]
        pairs = [(a, b) for a, b in zip(recorded, lp) if a is not None]
        if pairs:
            diffs = [abs(a - b) for a, b in pairs]
            mean = sum(diffs) / len(diffs)
            abs_sum, abs_n, worst = abs_sum + sum(diffs), abs_n + len(diffs), max(worst, mean)
            if mean > tolerance:
                i = max(range(len(diffs)), key=diffs.__getitem__)
                prov.problems.append(
                    f"line {r.line}: {r.spec.label}: the recorded log-probs are not this model's: mean |dlogp| "
                    f"{mean:.3f} > {tolerance} (worst token {i} of the actions: recorded {pairs[i][0]:.3f}, the "
                    f"model gives {pairs[i][1]:.3f})")
    if abs_n:
        prov.mean_abs_dlogp, prov.max_episode_dlogp = abs_sum / abs_n, worst
    if not greedy and len(d_all) >= 2:
        mean = sum(d_all) / len(d_all)
        var = sum((x - mean) ** 2 for x in d_all) / (len(d_all) - 1)
        prov.likelihood_z = mean / math.sqrt(var / len(d_all)) if var > 0 else 0.0
        if prov.likelihood_z < -LIKELIHOOD_Z:
            prov.problems.append(
                f"the sampled actions are less likely under {model} than its own samples would be (mean log p + H "
                f"= {mean:.3f} nats per token over {len(d_all)} tokens, t = {prov.likelihood_z:.1f} < "
                f"-{LIKELIHOOD_Z:g}): they were not sampled from this model at temperature {temp}")
    if prov.episodes == 0:
        prov.problems.append("no episode could be re-scored: there is nothing to check provenance on")
    return prov
